"""The shared explain path (pyrms/ops/_explain.py) on a made-up declaration: each generic rule of its walk raises
the error that names the argument, in the walk's order, and a valid call returns the facts (on the fake device)."""
from types import SimpleNamespace

import pytest

from pyrms import dtypes
from pyrms.ops import _explain
from tests.support.hostile_cases import environment

A, B, S = 1 << 20, 2 << 20, 3 << 20  # made-up addresses, far apart


def _facts(call, num_tokens, hidden):
    if call["mode"] == "bad":
        raise ValueError("the hook's own check")
    return SimpleNamespace(dtype=dtypes.BFLOAT16, out=dtypes.FLOAT32 if call["mode"] == "fp32" else dtypes.BFLOAT16,
                           in_place=call["mode"] != "never", rows=num_tokens)


DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("stat", dtypes.FLOAT32, span=_explain.PER_ROW, written=True, optional=True,
                              refusal="must be a 4-byte aligned pointer"),
              _explain.Memory("out", _explain.Fact("out"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("extra", stride="extra_stride", optional=True),
              _explain.Memory("scale", dtypes.FLOAT32, span=_explain.ONE, kind="a device pointer (int) to one float32")),
    facts=_facts, in_place=(("out", "input"),), in_place_when=_explain.Fact("in_place"),
    strides=("input_stride", "out_stride"))


def call(**kw):
    args = dict(stat=None, out=A, input=B, extra=None, scale=S, epsilon=1e-6, num_tokens=4, hidden_size=64,
                input_stride=None, out_stride=None, extra_stride=None, stream=None, pdl=True, mode="plain")
    args.update(kw)
    return _explain.explain(DECLARATION, args)


@pytest.mark.parametrize("kw,exc,message", [
    (dict(pdl=1), TypeError, "^pdl must be True or False, got 1$"),
    (dict(extra_stride=64), ValueError, "^extra_stride applies with a extra only, got extra_stride=64 and extra=None$"),
    (dict(num_tokens=None), TypeError, "^num_tokens and hidden_size are required"),
    (dict(epsilon=-1.0), ValueError, "^epsilon must be finite and >= 0, got -1.0$"),
    (dict(mode="bad"), ValueError, "^the hook's own check$"),
    (dict(stat=A + 2), ValueError, "^stat must be a 4-byte aligned pointer, got 1048578$"),
    (dict(scale=1.5), TypeError, r"^scale must be a device pointer \(int\) to one float32, got float$"),
    # strides in the declared order: input_stride's error before out_stride's
    (dict(input_stride=63, out_stride=1.5), ValueError, "^input_stride must be >= hidden_size"),
    (dict(out=0), ValueError, "^out must be a non-null device pointer, got 0$"),
    (dict(mode="fp32", out=A + 2), ValueError, "^out pointer 0x100002 is not aligned to 4 bytes, as float32 elements"),
    # extents in the strides' order: input's before out's
    (dict(num_tokens=2**31 - 1, hidden_size=2**31 - 1), ValueError, "^input spans 2147483647 rows"),
    (dict(mode="fp32", out=B), ValueError, "^out is input \\(in place\\), but out's dtype float32 is not input's"),
    (dict(out=B + 2), ValueError, "^out and input overlap; they must be disjoint or exactly the same memory"),
    (dict(out=B + 2, mode="never"), ValueError, "^out and input overlap; they must be disjoint$"),
    (dict(out=B, mode="never"), ValueError, "^out and input overlap; they must be disjoint$"),
    # what is written against everything after it, named in declaration order
    (dict(stat=B + 8), ValueError, "^stat and input overlap; they must be disjoint$"),
    (dict(scale=A + 8), ValueError, "^out and scale overlap; they must be disjoint$"),
    (dict(stream=-1), ValueError, "stream handle must be >= 0"),
])
def test_each_rule_names_the_argument(kw, exc, message):
    with pytest.raises(exc, match=message):
        call(**kw)


def test_read_only_operands_may_overlap_each_other():
    with environment("device"):
        facts = call(extra=S - 8)  # extra (read) over scale (read): nothing written between them
        assert facts.rows == 4
        assert call(out=B).in_place  # exactly the same memory, one dtype: in place

"""tests.support.case_matrix on the CPU: every op covered, every misalignment of every pointer present, sizes
with a prefix, a body and a tail, each case once, the same matrix on every call, and each case's
checker arguments fitting its checker (run on host memory through tools/random_check_host_time.py)."""
import inspect
from collections import Counter

import pytest

from pyrms import dtypes, precompile
from pyrms.ops import registry
from tests.support import case_matrix, testing
from tests.support.case_matrix import BACKWARD, DTYPES, FAMILIES, GPU_AXES, case, gpu, sanitize

GPU_FAMILIES = case_matrix.gpu_families()


def _all_gpu():
    return [c for family in GPU_FAMILIES for axis in GPU_AXES for c in gpu(family, axis)]


def _all_sanitize(quick=False):
    return [c for family in FAMILIES for c in sanitize(family, quick)]


def test_families_are_the_sanitizers_ops():
    assert set(FAMILIES) == set(precompile.OPS)


def test_every_op_and_dtype_is_covered():
    assert {(c.op, c.dtype) for c in _all_sanitize()} == {(op, d) for op in case_matrix.OPS for d in DTYPES}
    assert set(GPU_FAMILIES) == {"rms_norm", "fused_add_rms_norm", "layer_norm", *BACKWARD}
    assert {(c.op, c.dtype) for c in _all_gpu()} == {(op, d) for op in GPU_FAMILIES for d in DTYPES}


@pytest.mark.parametrize("source", ["gpu_axes", "sanitizer"])  # not "gpu": conftest skips what that names
def test_every_misalignment_of_every_pointer_is_present(source):
    """For each op, dtype and pointer, every offset 0 .. VEC-1 (in the pointer's own elements) alone."""
    cases = _all_gpu() if source == "gpu_axes" else _all_sanitize()
    alone = {(c.op, c.dtype, *c.offsets[0]) for c in cases if len(c.offsets) == 1}
    for op in GPU_FAMILIES:
        rows, vectors = case_matrix.operands(op)
        for dtype in DTYPES:
            for name in rows + vectors:
                for off in range(1, case_matrix.vector_elements(dtype, name)):
                    assert (op, dtype, name, off) in alone, (source, op, dtype, name, off)


def test_sizes_have_prefix_body_and_tail_paths():
    """Sizes shorter than a vector, exact multiples, and a body with a tail; for the 2-byte dtypes (8 a
    vector) and fp32 (4)."""
    for cases in (_all_gpu(), _all_sanitize()):
        for op in GPU_FAMILIES:
            hiddens = {c.hidden for c in cases if c.op == op}
            for vec in (8, 4):
                assert any(h < vec for h in hiddens), op
                assert any(h % vec == 0 and h >= vec for h in hiddens), op
                assert any(h % vec and h > vec for h in hiddens), op
            assert any(h > 65536 for h in hiddens), op


def test_strided_in_place_and_row_variants_are_present():
    for cases in (_all_gpu(), _all_sanitize()):
        for op in GPU_FAMILIES:
            mine = [c for c in cases if c.op == op]
            assert any(c.rows > 1 and any(not isinstance(s, tuple) and s % 8 for _, s in c.strides) for c in mine), op
            if op != "fused_add_rms_norm":
                assert any(c.option("in_place") for c in mine), op
            if op not in BACKWARD:
                assert {c.option("variant") for c in mine} >= {"few", "many"}, op


def test_no_duplicate_cases():
    for family in GPU_FAMILIES:
        cases = [c for axis in GPU_AXES for c in gpu(family, axis)]
        assert len(cases) == len(set(cases)), family  # across axes too: each case on one axis
    for quick in (False, True):
        cases = _all_sanitize(quick)
        assert len(cases) == len(set(cases))


def test_deterministic_and_counted():
    assert _all_sanitize() == _all_sanitize() and _all_gpu() == _all_gpu()
    # The counts the sanitizer logs report (tools/sanitize_all.py --count); a change here changes them.
    assert Counter(c.op for c in _all_sanitize()) == {
        "rms_norm": 1054, "rms_norm_nd": 138, "fused_add_rms_norm": 973, "layer_norm": 1414,
        "rms_norm_backward": 882, "layer_norm_backward": 938, "rms_norm_quant": 603,
        "fused_add_rms_norm_quant": 807, "layer_norm_quant": 280, "seed_rms_norm": 6, "static_quant": 234,
        "dynamic_quant": 411, "qk_norm_rope": 358, "gated_rms_norm": 700, "gated_rms_norm_backward": 670}
    # the quantizing ops' offsets are all 1 or VEC-1 (132 of their cases with a norm_out), and so are the 238
    # mixed-dtype cases' (an fp32 out at 7); static_quant's quick cases: its offsets 0, 1 and VEC-1 (156), and
    # dynamic_quant's (267); the backward's 112 fp32-weight cases (a weight at 0 or VEC-1); 140 of the 182
    # RMSNorm-with-a-bias cases (14 of them among the 238); qk_norm_rope's 251 (its qkv at 0, 1 and VEC-1, the other
    # operands' offsets as they are; 95 of its 102 KV cache cases, an fp8 cache's offsets past VEC-1 left out);
    # layer_norm_quant's 280 (its offsets all 1 or VEC-1); gated_rms_norm's 482 (its x at 0, 1 and VEC-1, z and out
    # at 1 and VEC-1, all but the fp32 weight at 3); gated_rms_norm_backward's 452 (its x at 0, 1 and VEC-1)
    assert len(_all_sanitize(quick=True)) == 2355 + 1410 + 238 + 156 + 267 + 112 + 126 + 251 + 280 + 482 + 452
    assert sum(c.option("out_kind") == "float32" or (c.op == "layer_norm" and c.option("weight") == "float32")
               for c in _all_sanitize()) == 238
    assert sum(c.option("rms") or c.option("rms_bias") for c in _all_sanitize()) == 182
    assert sum(c.option("rms") or c.option("rms_bias") for c in _all_sanitize(quick=True)) == 140


def test_quick_keeps_offsets_0_1_and_vec_minus_1():
    full, quick = _all_sanitize(), _all_sanitize(quick=True)
    # under 0.65: the quantizing ops' and the mixed dtypes' cases are at quick offsets only
    assert set(quick) < set(full) and len(quick) < 0.65 * len(full)
    for c in quick:
        n = dtypes.get(c.dtype).vec_elems
        assert {off for _, off in c.offsets} <= {1, n - 1}
    assert {(c.op, c.dtype, c.hidden) for c in quick} == {(c.op, c.dtype, c.hidden) for c in full}


def test_cases_are_canonical_and_equal_when_they_mean_the_same():
    a = case("rms_norm", "bf16", 3, 7, offsets={"input": 0, "weight": 1}, strides={"input": 7}, gemma=False)
    assert a == case("rms_norm", "bfloat16", 3, 7, offsets={"weight": 1}) and a.offsets == (("weight", 1),)
    assert a.strides == () and a.options == () and a.option("epsilon") == 1e-5
    assert str(case("layer_norm", "float16", 2, 9, offsets={"out": 3}, strides={"input": 11}, bias=False)) == \
        "layer_norm-float16-2x9-out+3-input/11-bias=False"
    nd = case("rms_norm_nd", "float32", None, 8, strides={"input": (24, 8)}, sizes=(3, 2))
    assert nd.rows == 6 and nd.strides == (("input", (24, 8)),)
    assert case("rms_norm_nd", "float32", None, 8, strides={"input": (16, 8)}, sizes=(3, 2)).strides == ()


@pytest.mark.parametrize("make, message", [
    (lambda: case("rms_norm", "bfloat16", 2, 8, offsets={"residual": 1}), r"unknown operands \['residual'\]"),
    (lambda: case("rms_norm", "bfloat16", 2, 8, in_place=True, offsets={"out": 1}), r"unknown operands \['out'\]"),
    (lambda: case("fused_add_rms_norm", "bfloat16", 2, 8, bias=False), r"got \['bias'\]"),
    (lambda: case("seed_rms_norm", "float32", 0, 8), "rows and hidden must be >= 1"),
    (lambda: case("rms", "float32", 1, 8), "op must be one of"),
    (lambda: case_matrix.Case("rms_norm", "bfloat16", 2, 8, offsets=(("input", 0),)), "canonical form"),
    (lambda: gpu("rms_norm", "sideways"), "axis must be one of"),
    (lambda: sanitize("rmsnorm"), "family must be one of"),
])
def test_bad_cases_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_concurrency_and_soak_cases():
    assert case_matrix.concurrency_ops() == ("rms_norm", "rms_norm_backward")
    for op in case_matrix.concurrency_ops():
        cases = case_matrix.concurrency(op)
        assert len(cases) == len(set(cases)) and {c.op for c in cases} == {op}
        assert len({c.hidden for c in cases}) == 1  # one hidden size per op (tools/concurrency_check.py)
        for name in case_matrix.pointers(op):  # each pointer at every misalignment over the launches
            assert {c.offset(name) for c in cases} == set(range(8)), (op, name)
    assert {c.op for c in case_matrix.SOAK.values()} == {"rms_norm", "layer_norm", "rms_norm_backward"}


def test_checker_arguments_fit_the_checkers():
    for c in {*_all_gpu(), *_all_sanitize(), *case_matrix.concurrency("rms_norm")}:
        check, kwargs = testing.checker_call(c)
        inspect.signature(check).bind(None, stream=None, **kwargs)  # TypeError on a wrong keyword


def test_each_case_compares_exactly_its_operands(host_device, rng):
    """On host memory with launches that write nothing: the check flags the case's outputs and compares
    every operand the case names, so its layout is the one run (a sample of the small cases)."""
    differences, compared = host_device
    # The randomized check's ops only: the host-memory stand-in replaces their functions alone (the others'
    # launches would run; the quantizing ops' checker also allocates its byte output and fp32 scales itself,
    # testing._raw, which the stand-in does not replace).
    small = [c for c in _all_sanitize() if c.rows * c.hidden <= 4096 and registry.get(c.op).random]
    for c in small[::37]:
        differences.clear()
        compared.clear()
        testing.check_case(rng, c)
        # An in-place output is compared under the name of the operand it stands for (rms_norm's 'out').
        every = set(case_matrix.pointers(c.op, **{k: v for k, v in c.options if k != "in_place"}))
        assert {name for name, _ in c.offsets} - {c.option("in_place")} <= set(compared), c
        assert set(differences) and set(differences) <= every, c

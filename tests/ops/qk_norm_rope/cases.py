"""qk_norm_rope's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands, the call
that runs a case of the case matrix (``hidden`` is head_dim, ``rows`` the tokens), and its sanitizer cases."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import dtypes
from tests.support.case_matrix import Case, case
from tests.support.op_tests import OpTests
from tests.support.testing import (allocate, case_common, case_label, closing, guarded, pdl_option, phases,
                                   put_specials, run_checked)


def rope_cache(max_position: int, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """A float32 [max_position, rotary_dim] cos_sin_cache as vLLM's RotaryEmbedding builds it: cos(p * f_k) in the
    first half, sin(p * f_k) in the second, f_k = base^(-2k / rotary_dim)."""
    freqs = np.outer(np.arange(max_position), base ** (-np.arange(0, rotary_dim, 2) / rotary_dim))
    return np.concatenate([np.cos(freqs), np.sin(freqs)], axis=1).astype(np.float32)


def check_qk_norm_rope(rng, dtype, rows, hidden, *, num_q_heads=4, num_kv_heads=2, offsets=None, strides=None,
                       gemma=False, is_neox=True, rotary_dim=None, epsilon=1e-5, specials=False, stream=None, pdl=None):
    """One pyrms.qk_norm_rope launch on guarded operands: ``rows`` tokens of heads of ``hidden`` (head_dim)
    elements, the q and k heads compared bit for bit with qk_norm_rope_twin; v's heads, the gaps between tokens,
    the guards and every other operand unchanged.

    offsets: 'qkv', 'q_weight', 'k_weight' (elements past a 16-byte boundary), 'cos_sin_cache' (fp32 elements),
    'positions' (int64 elements); strides: 'qkv' (elements between tokens; default the q, k and v heads'). The
    positions are drawn from a cache of 4 * rows + 7 rows (position 0 included). specials: NaN, inf and -inf in
    token 0 and an all-zero last token."""
    from pyrms.ops.qk_norm_rope import qk_norm_rope
    from pyrms.ops.qk_norm_rope.twin import qk_norm_rope_twin

    dt = dtypes.get(dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    width = (num_q_heads + 2 * num_kv_heads) * hidden
    x = allocate(rng, dt, rows, width, misalign=offsets.get("qkv", 0), stride=strides.get("qkv"))
    if specials:
        v = x.values().astype(np.float64)
        put_specials(rng, v)
        x.set_values(v.astype(dt.numpy))
        x.upload()
    qw = allocate(rng, dt, 1, hidden, misalign=offsets.get("q_weight", 0), low=0.5, high=1.5)
    kw = allocate(rng, dt, 1, hidden, misalign=offsets.get("k_weight", 0), low=-0.5, high=1.5)
    rot = hidden if rotary_dim is None else rotary_dim
    max_position = 4 * rows + 7
    cache = guarded(np.float32, max_position, rot, offsets.get("cos_sin_cache", 0), None, np.float32(7.0))
    cache.set_values(rope_cache(max_position, rot))
    cache.upload()
    pos = rng.integers(0, max_position, rows)
    pos[0] = 0
    positions = guarded(np.int64, 1, rows, offsets.get("positions", 0), None, -1)
    positions.set_values(pos[None])
    positions.upload()
    want = qk_norm_rope_twin(x.values(), qw.values()[0], kw.values()[0], cache.values(), pos,
                             num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=hidden, rotary_dim=rot,
                             is_neox=is_neox, epsilon=epsilon, gemma=gemma, phase=phases(x))
    label = case_label("qk_norm_rope", dt, rows, hidden, offsets, strides, heads=(num_q_heads, num_kv_heads),
                       gemma=gemma, is_neox=is_neox, rotary_dim=rot, epsilon=epsilon, specials=specials, pdl=pdl)
    with closing(x, qw, kw, cache, positions):
        run_checked(label, lambda: qk_norm_rope(
            x.ptr, qw.ptr, kw.ptr, cache.ptr, positions.ptr, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
            head_dim=hidden, rotary_dim=rotary_dim, is_neox=is_neox, epsilon=epsilon, gemma=gemma, num_tokens=rows,
            token_stride=x.stride, dtype=dt, stream=stream, **pdl_option(pdl)),
            outputs={"qkv": (x, want)},
            inputs={"q_weight": qw, "k_weight": kw, "cos_sin_cache": cache, "positions": positions})


def _checker_call(case) -> tuple:
    opt = case.option
    return check_qk_norm_rope, dict(case_common(case), rows=case.rows, offsets=dict(case.offsets),
                                    strides=dict(case.strides), gemma=opt("gemma"), is_neox=opt("is_neox"),
                                    rotary_dim=opt("rotary_dim"), specials=opt("specials"), pdl=opt("pdl"))


# --- its cases of the case matrix


def _sanitize(dtype: str) -> Iterator[Case]:
    """QK-norm + RoPE (4 q and 2 kv heads a token): qkv at every phase and the weights, cache and positions
    misaligned, NeoX and GPT-J, at head sizes that pack 8 lanes (64, 82, 128) or 32 (256), one with a tail
    (82: 2-byte rows); a token stride off the vector with specials, partial rotary dims (rotary_dim / 2 whole
    vectors or not), Gemma, and token counts that fill a block of heads, or not."""
    op, n = "qk_norm_rope", dtypes.get(dtype).vec_elems
    for is_neox in (True, False):
        for head_dim in (64, 82, 128, 256):
            for off in range(n):
                yield case(op, dtype, 3, head_dim, offsets={"qkv": off}, is_neox=is_neox)
        for name, off in (("q_weight", 1), ("k_weight", n - 1), ("cos_sin_cache", 1), ("cos_sin_cache", 3),
                          ("positions", 1)):
            yield case(op, dtype, 5, 128, offsets={name: off}, is_neox=is_neox)
        yield case(op, dtype, 7, 128, offsets={"qkv": 1, "q_weight": 3}, strides={"qkv": 8 * 128 + 3},
                   is_neox=is_neox, specials=True)
        for head_dim, rot in ((128, 64), (128, 96), (80, 24), (64, 2), (256, 128)):
            yield case(op, dtype, 5, head_dim, rotary_dim=rot, is_neox=is_neox)
        yield case(op, dtype, 5, 128, offsets={"qkv": 3}, rotary_dim=64, is_neox=is_neox)
        for rows in (1, 6, 33, 300):
            yield case(op, dtype, rows, 128, gemma=True, is_neox=is_neox, epsilon=1e-6)


TESTS = {"qk_norm_rope": OpTests(_checker_call, _sanitize)}

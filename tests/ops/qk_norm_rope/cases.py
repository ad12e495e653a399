"""qk_norm_rope's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands, the call
that runs a case of the case matrix (``hidden`` is head_dim, ``rows`` the tokens), and its sanitizer cases."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import driver, dtypes
from pyrms.ops.qk_norm_rope.twin import rope_cache
from tests.support.case_matrix import Case, case
from tests.support.op_tests import OpTests
from tests.support.testing import (GUARD, Rows, allocate, case_common, case_label, closing, guarded, pdl_option,
                                   phases, put_specials, run_checked)

# The caches' layouts a case may take (its cache_layout): (block_size, (block, page, head) strides as a function of
# (num_kv_heads, head_dim), None: contiguous). NHD: vLLM's flash layout, contiguous; padded: every stride longer
# than its contents, none a multiple of the vector, 5 slots a block; HND: the heads outermost in a block, padded.
CACHE_LAYOUTS = {
    "nhd": (16, None),
    "padded": (5, lambda nkv, d: (5 * (nkv * (d + 1) + 3) + 7, nkv * (d + 1) + 3, d + 1)),
    "hnd": (8, lambda nkv, d: (nkv * 8 * d + 16, d, 8 * d)),
}
KV_SCALES = (0.0125, 0.004)  # k's and v's fp8 scales: normalized k and the v values reach 448 (saturation) and below
FP8_FILL = 0x5A  # the fp8 caches' guard byte (an ordinary e4m3 value: 208.0)


def kv_caches(dt, kv_cache_dtype: str, num_kv_heads: int, head_dim: int, rows: int, layout: str, offsets: dict):
    """Guarded key and value caches [num_blocks, block_size, num_kv_heads, head_dim] of the layout (one block more
    than the rows need, so some slots are never written), every element outside the written slots a guard value
    that must survive; (key_cache, value_cache, num_blocks, block_size, (block, page, head) strides)."""
    block_size, strides_of = CACHE_LAYOUTS[layout]
    strides = (strides_of or (lambda nkv, d: (block_size * nkv * d, nkv * d, d)))(num_kv_heads, head_dim)
    num_blocks = -(-rows // block_size) + 1
    sizes = (num_blocks, block_size, num_kv_heads)
    span = sum((n - 1) * st for n, st in zip(sizes, strides)) + head_dim
    caches = []
    for name in ("key_cache", "value_cache"):
        misalign = offsets.get(name, 0)
        total = GUARD + misalign + span + GUARD
        host = (np.full(total, 7.0, dt.numpy) if kv_cache_dtype == "auto" else np.full(total, FP8_FILL, np.uint8))
        operand = Rows(driver.DeviceBuffer(host.nbytes), host, GUARD + misalign, num_blocks * block_size * num_kv_heads,
                       head_dim, head_dim, lead=(sizes, strides))
        operand.upload()
        caches.append(operand)
    return (*caches, num_blocks, block_size, strides)


def _cache_view(operand: Rows, kv_cache_dtype: str) -> np.ndarray:
    """A cache's values as the twin takes them: [num_blocks, block_size, num_kv_heads, head_dim] (fp8: e4m3)."""
    sizes, _ = operand.lead
    values = operand.values().reshape(*sizes, operand.hidden)
    return values if kv_cache_dtype == "auto" else values.view(dtypes.FLOAT8_E4M3FN.numpy)


def check_qk_norm_rope(rng, dtype, rows, hidden, *, num_q_heads=4, num_kv_heads=2, offsets=None, strides=None,
                       gemma=False, is_neox=True, rotary_dim=None, epsilon=1e-5, specials=False, stream=None, pdl=None,
                       kv_cache=False, kv_cache_dtype="auto", cache_layout="nhd", device_scale=False):
    """One pyrms.qk_norm_rope launch on guarded operands: ``rows`` tokens of heads of ``hidden`` (head_dim)
    elements, the q and k heads compared bit for bit with qk_norm_rope_twin; v's heads, the gaps between tokens,
    the guards and every other operand unchanged.

    offsets: 'qkv', 'q_weight', 'k_weight' (elements past a 16-byte boundary), 'cos_sin_cache' (fp32 elements),
    'positions', 'slot_mapping' (int64 elements), 'key_cache', 'value_cache' (elements of the caches' dtype);
    strides: 'qkv' (elements between tokens; default the q, k and v heads'). The positions are drawn from a cache
    of 4 * rows + 7 rows (position 0 included). specials: NaN, inf and -inf in token 0 and an all-zero last token.

    kv_cache: the paged caches of ``cache_layout`` (CACHE_LAYOUTS) and ``kv_cache_dtype`` ('auto' or 'fp8', the
    scales KV_SCALES, read from device memory with ``device_scale``), compared whole with kv_cache_twin: the
    kept tokens' slots (distinct, drawn at random) hold their k and v, every other slot, the strides' gaps and
    the guards keep their guard values; from 2 tokens on, every third token (the second first) is padding (slot
    -1), which writes nothing."""
    from pyrms.ops.qk_norm_rope import qk_norm_rope
    from pyrms.ops.qk_norm_rope.twin import kv_cache_twin, qk_norm_rope_twin

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
                       gemma=gemma, is_neox=is_neox, rotary_dim=rot, epsilon=epsilon, specials=specials, pdl=pdl,
                       kv_cache=kv_cache, kv_cache_dtype=kv_cache_dtype, cache_layout=cache_layout,
                       device_scale=device_scale)
    operands = [x, qw, kw, cache, positions]
    outputs = {"qkv": (x, want)}
    inputs = {"q_weight": qw, "k_weight": kw, "cos_sin_cache": cache, "positions": positions}
    kv_args: dict = {}
    if kv_cache:
        kc, vc, num_blocks, block_size, cache_strides = kv_caches(dt, kv_cache_dtype, num_kv_heads, hidden, rows,
                                                                  cache_layout, offsets)
        slots = rng.permutation(num_blocks * block_size)[:rows]
        slots[1::3] = -1  # padding tokens
        slot_mapping = guarded(np.int64, 1, rows, offsets.get("slot_mapping", 0), None, -7)
        slot_mapping.set_values(slots[None])
        slot_mapping.upload()
        scale_values = KV_SCALES if kv_cache_dtype != "auto" else (1.0, 1.0)
        scales = list(scale_values)
        for k, name in enumerate(("k_scale", "v_scale") if device_scale else ()):  # one fp32 each, read by the kernel
            operand = guarded(np.float32, 1, 1, 0, None, np.float32(-1.0))
            operand.set_values(np.array([[scale_values[k]]], np.float32))
            operand.upload()
            inputs[name], scales[k] = operand, operand.ptr
            operands.append(operand)
        want_k, want_v = kv_cache_twin(want, _cache_view(kc, kv_cache_dtype), _cache_view(vc, kv_cache_dtype), slots,
                                       num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=hidden,
                                       kv_cache_dtype=kv_cache_dtype, k_scale=scale_values[0],
                                       v_scale=scale_values[1])
        for name, operand, values in (("key_cache", kc, want_k), ("value_cache", vc, want_v)):
            outputs[name] = (operand, values.reshape(-1, hidden).view(operand.host.dtype))
        inputs["slot_mapping"] = slot_mapping
        operands += [kc, vc, slot_mapping]
        kv_args = dict(key_cache=kc.ptr, value_cache=vc.ptr, slot_mapping=slot_mapping.ptr,
                       kv_cache_dtype=kv_cache_dtype, k_scale=scales[0], v_scale=scales[1], num_blocks=num_blocks,
                       block_size=block_size, cache_strides=cache_strides)
    with closing(*operands):
        run_checked(label, lambda: qk_norm_rope(
            x.ptr, qw.ptr, kw.ptr, cache.ptr, positions.ptr, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
            head_dim=hidden, rotary_dim=rotary_dim, is_neox=is_neox, epsilon=epsilon, gemma=gemma, num_tokens=rows,
            token_stride=x.stride, dtype=dt, stream=stream, **kv_args, **pdl_option(pdl)),
            outputs=outputs, inputs=inputs)


def _checker_call(case) -> tuple:
    opt = case.option
    return check_qk_norm_rope, dict(case_common(case), rows=case.rows, offsets=dict(case.offsets),
                                    strides=dict(case.strides), gemma=opt("gemma"), is_neox=opt("is_neox"),
                                    rotary_dim=opt("rotary_dim"), specials=opt("specials"), pdl=opt("pdl"),
                                    kv_cache=opt("kv_cache"), kv_cache_dtype=opt("kv_cache_dtype"),
                                    cache_layout=opt("cache_layout"), device_scale=opt("device_scale"))


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
    yield from _kv_cache_cases(dtype)


def _kv_cache_cases(dtype: str) -> Iterator[Case]:
    """With the paged KV cache, 'auto' and fp8 (the scales as values and on the device): the three layouts, head
    sizes with and without a tail, each cache and slot_mapping misaligned, a misaligned and strided qkv with
    specials (fp8's NaN and saturation), and token counts of one, a block of heads and many."""
    op, n = "qk_norm_rope", dtypes.get(dtype).vec_elems
    for kind in ("auto", "fp8"):
        kv = dict(kv_cache=True, kv_cache_dtype=kind)
        for layout in ("nhd", "padded", "hnd"):
            for head_dim in (64, 82, 128):
                yield case(op, dtype, 7, head_dim, cache_layout=layout, **kv)
        cache_vector = n if kind == "auto" else 16  # the caches' elements in a 16-byte vector
        for name, off in (("key_cache", 1), ("value_cache", cache_vector - 1), ("slot_mapping", 1)):
            yield case(op, dtype, 5, 128, offsets={name: off}, **kv)
        yield case(op, dtype, 7, 128, offsets={"qkv": 1, "key_cache": 3}, strides={"qkv": 8 * 128 + 3},
                   specials=True, cache_layout="padded", **kv)
        yield case(op, dtype, 9, 128, rotary_dim=64, is_neox=False, gemma=True, device_scale=True, **kv)
        for rows in (1, 33, 300):
            yield case(op, dtype, rows, 128, device_scale=kind == "fp8", **kv)


TESTS = {"qk_norm_rope": OpTests(_checker_call, _sanitize)}

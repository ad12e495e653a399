"""qk_norm_rope's float64 reference and bit-exact numpy twin (on the row core's twin, pyrms/ops/_row_twin.py).

Both take the fused QKV as a 2-D array [tokens, token_stride] (the q heads, then the k heads, then the v heads
from column 0, anything after them untouched) and return a copy with the q and k heads rewritten. With kv_cache,
kv_cache_ref and kv_cache_twin give the paged caches after the launch from the qkv it leaves."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._quant_twin import quantize
from .._row_twin import F32, _one_nan, row_stats_twin
from .plan import kv_cache_dtype_arg, plan_qk_norm_rope

__all__ = ["qk_norm_rope_ref", "qk_norm_rope_twin", "kv_cache_ref", "kv_cache_twin", "rope_cache"]  # pyrms.reference's


def rotary_dim_arg(rotary_dim, head_dim: int) -> int:
    """rotary_dim: None (head_dim) or an even int from 2 to head_dim; ValueError naming it otherwise."""
    if rotary_dim is None:
        return head_dim
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer)) or not (
            2 <= rotary_dim <= head_dim and rotary_dim % 2 == 0):
        raise ValueError(f"rotary_dim must be an even int from 2 to head_dim ({head_dim}), got {rotary_dim!r}")
    return int(rotary_dim)


def rope_cache(max_position: int, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """A float32 [max_position, rotary_dim] cos_sin_cache as vLLM's RotaryEmbedding builds it: cos(p * f_k) in the
    first half, sin(p * f_k) in the second, f_k = base^(-2k / rotary_dim)."""
    freqs = np.outer(np.arange(max_position), base ** (-np.arange(0, rotary_dim, 2) / rotary_dim))
    return np.concatenate([np.cos(freqs), np.sin(freqs)], axis=1).astype(np.float32)


def _heads(qkv, num_q_heads: int, num_kv_heads: int, head_dim: int):
    """(the q and k heads as rows [tokens * heads, head_dim], heads per token, whether each row is a q head)."""
    x = np.asarray(qkv)
    if x.ndim != 2 or x.shape[1] < (num_q_heads + 2 * num_kv_heads) * head_dim:
        raise ValueError(f"qkv must be [tokens, >= (num_q_heads + 2 * num_kv_heads) * head_dim "
                         f"= {(num_q_heads + 2 * num_kv_heads) * head_dim}], got shape {x.shape}")
    heads = num_q_heads + num_kv_heads
    rows = x[:, :heads * head_dim].reshape(-1, head_dim)
    return rows, heads, np.arange(rows.shape[0]) % heads < num_q_heads


def _rotate(a, cs, rot: int, is_neox: bool):
    """The rotation of rows a (rot <= head_dim columns rotated, the rest as they are) by each row's cache row cs
    [rows, rot] (cos in the first half, sin in the second), in a's float type: first of a pair a*c - b*s, second
    a*c + b*s, each product and sum rounded in that type."""
    half = rot // 2
    cos, sin = cs[:, :half], cs[:, half:rot]
    first, second = (slice(0, half), slice(half, rot)) if is_neox else (slice(0, rot, 2), slice(1, rot, 2))
    out = a.copy()
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 and overflow, as on the GPU
        out[:, first] = a[:, first] * cos - a[:, second] * sin
        out[:, second] = a[:, second] * cos + a[:, first] * sin
    return out


def qk_norm_rope_ref(qkv, q_weight, k_weight, cos_sin_cache, positions, *, num_q_heads, num_kv_heads, head_dim,
                     rotary_dim=None, is_neox=True, epsilon=1e-6, gemma=False) -> np.ndarray:
    """float64 QK-norm then rotary embedding: each q and k head x / sqrt(mean(x^2) + eps) * w (w = 1 + weight
    for Gemma), rotated by cos_sin_cache[positions[token]] (NeoX pairs (k, k + rot/2), GPT-J (2k, 2k+1));
    returns qkv as float64 with those heads replaced."""
    rows, heads, is_q = _heads(qkv, num_q_heads, num_kv_heads, head_dim)
    rot = rotary_dim_arg(rotary_dim, head_dim)
    x = rows.astype(np.float64)
    w = np.where(is_q[:, None], np.asarray(q_weight, np.float64), np.asarray(k_weight, np.float64))
    if gemma:
        w = 1.0 + w
    a = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + float(epsilon)) * w
    cs = np.repeat(np.asarray(cos_sin_cache, np.float64)[np.asarray(positions)], heads, axis=0)
    out = np.array(qkv, dtype=np.float64)
    out[:, :heads * head_dim] = _rotate(a, cs, rot, is_neox).reshape(out.shape[0], -1)
    return out


def qk_norm_rope_twin(qkv, q_weight, k_weight, cos_sin_cache, positions, *, num_q_heads, num_kv_heads, head_dim,
                      rotary_dim=None, is_neox=True, epsilon=1e-6, gemma=False, phase=0) -> np.ndarray:
    """Bit-exact twin of qk_norm_rope_kernel: qkv (bfloat16, float16 or float32, [tokens, >= (num_q_heads + 2 *
    num_kv_heads) * head_dim]) with its q and k heads rewritten. Each head's inv_rms is the RMSNorm row's (the row
    core's tree, fold 32, at the head's alignment: ``phase`` is each token's first element's position inside its
    16-byte vector, in elements: an int for every token, or one per token); then in fp32
    a = (x * inv_rms) * w, its rotation (_rotate), and one rounding to the storage dtype. NaN results are the
    GPU's one NaN. cos_sin_cache: float32 [max_position, rotary_dim]; positions: int [tokens]."""
    rows, heads, is_q = _heads(qkv, num_q_heads, num_kv_heads, head_dim)
    dt = dtypes.get(rows.dtype)
    plan = plan_qk_norm_rope(dt, head_dim, gemma=gemma, is_neox=is_neox)  # ValueError for what it refuses
    rot = rotary_dim_arg(rotary_dim, head_dim)
    tokens = np.asarray(qkv).shape[0]
    starts = np.broadcast_to(np.asarray(phase), (tokens,))[:, None] + np.arange(heads)[None, :] * head_dim
    xf = rows.astype(F32)
    _, inv = row_stats_twin(xf, epsilon, plan.fold, (starts % dt.vec_elems).ravel(), dt.vec_elems)
    w = np.where(is_q[:, None], np.asarray(q_weight).astype(F32), np.asarray(k_weight).astype(F32))
    if gemma:
        w = F32(1.0) + w
    with np.errstate(invalid="ignore", over="ignore"):
        a = (xf * inv[:, None]) * w
    cs = np.repeat(np.asarray(cos_sin_cache, F32)[np.asarray(positions)], heads, axis=0)
    out = np.array(qkv, copy=True)
    out[:, :heads * head_dim] = _one_nan(_rotate(a, cs, rot, is_neox).astype(dt.numpy)).reshape(tokens, -1)
    return out


def _kv_heads(qkv, slot_mapping, num_q_heads: int, num_kv_heads: int, head_dim: int):
    """(the tokens with a slot, their slots, their k heads and v heads [tokens, num_kv_heads, head_dim])."""
    x = np.asarray(qkv)
    slots = np.asarray(slot_mapping, np.int64)
    if slots.shape != (x.shape[0],):
        raise ValueError(f"slot_mapping must be [tokens] = [{x.shape[0]}], got shape {slots.shape}")
    kept = np.flatnonzero(slots >= 0)  # negative: a padding token, nothing written
    k0, v0 = num_q_heads * head_dim, (num_q_heads + num_kv_heads) * head_dim
    k = x[kept, k0:v0].reshape(len(kept), num_kv_heads, head_dim)
    v = x[kept, v0:v0 + num_kv_heads * head_dim].reshape(len(kept), num_kv_heads, head_dim)
    return kept, slots[kept], k, v


def kv_cache_ref(qkv, key_cache, value_cache, slot_mapping, *, num_q_heads, num_kv_heads, head_dim,
                 kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0) -> tuple[np.ndarray, np.ndarray]:
    """float64 spelling of vLLM's reshape_and_cache_flash_kernel after the op: for each token t of qkv (qkv as
    qk_norm_rope_ref leaves it) with slot = slot_mapping[t] >= 0 and each of its kv heads h, element i goes to
    flat index (slot // block_size) * block_stride + (slot % block_size) * page_stride + h * head_stride + i of
    the caches ([num_blocks, block_size, num_kv_heads, head_dim] arrays, any strides, read as flat memory);
    'fp8' stores x / scale saturated to +-448, unrounded. Returns float64 copies of the caches."""
    kind = kv_cache_dtype_arg(kv_cache_dtype)
    x = np.asarray(qkv, np.float64)
    out = []
    for cache, first, scale in ((key_cache, num_q_heads, k_scale), (value_cache, num_q_heads + num_kv_heads,
                                                                     v_scale)):
        cache = np.asarray(cache)
        block_size = cache.shape[1]
        block_stride, page_stride, head_stride, _ = (s // cache.itemsize for s in cache.strides)
        flat = np.zeros(max(1, sum((n - 1) * st for n, st in zip(cache.shape, (block_stride, page_stride,
                                                                                  head_stride, 1))) + 1))
        where = np.lib.stride_tricks.as_strided(flat, cache.shape, tuple(8 * s for s in (block_stride, page_stride,
                                                                                         head_stride, 1)))
        where[...] = cache.astype(np.float64)
        for t, slot in enumerate(np.asarray(slot_mapping)):
            if slot < 0:
                continue
            for h in range(num_kv_heads):
                head = x[t, (first + h) * head_dim:(first + h + 1) * head_dim]
                if kind != "auto":
                    head = np.clip(head / float(np.float32(scale)), -448.0, 448.0)
                at = (slot // block_size) * block_stride + (slot % block_size) * page_stride + h * head_stride
                flat[at:at + head_dim] = head
        out.append(where.copy())
    return out[0], out[1]


def kv_cache_twin(qkv, key_cache, value_cache, slot_mapping, *, num_q_heads, num_kv_heads, head_dim,
                  kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0) -> tuple[np.ndarray, np.ndarray]:
    """Bit-exact twin of qk_norm_rope_kernel's KV_CACHE stores: copies of key_cache and value_cache ([num_blocks,
    block_size, num_kv_heads, head_dim], of qkv's dtype for 'auto', float8_e4m3fn for 'fp8'/'fp8_e4m3') with
    each token of qkv (as qk_norm_rope_twin leaves it) whose slot is >= 0 written at block slot // block_size,
    offset slot % block_size: its k heads into key_cache, its v heads into value_cache; 'auto' as they are, fp8
    as float32(x) / scale (one fp32 division, the scale rounded to float32) saturated to +-448 and rounded to
    nearest even, NaN the one 0x7F. Padding tokens (negative slots) write nothing."""
    kind = kv_cache_dtype_arg(kv_cache_dtype)
    kept, slots, k, v = _kv_heads(qkv, slot_mapping, num_q_heads, num_kv_heads, head_dim)
    out = []
    for cache, heads, scale in ((key_cache, k, k_scale), (value_cache, v, v_scale)):
        cache = np.array(cache, copy=True)
        block_size = cache.shape[1]
        if kind != "auto":
            rows = heads.astype(F32).reshape(-1, head_dim)
            heads = quantize(rows, F32(scale), dtypes.FLOAT8_E4M3FN, divide=True).reshape(heads.shape)
        if cache.dtype != heads.dtype:
            raise ValueError(f"the caches hold {cache.dtype}, but kv_cache_dtype={kv_cache_dtype!r} stores "
                             f"{heads.dtype}")
        cache[slots // block_size, slots % block_size] = heads
        out.append(cache)
    return out[0], out[1]

"""Numpy references for the kernels (no GPU, no CUDA import).

- ``rms_norm_ref``: float64, the mathematical definition; for tolerances.
- ``rms_norm_twin``: reproduces ``cuda_src/rms_norm.cu`` bit for bit: the same per-thread
  accumulation order (by the input row's alignment), the same butterfly reduction, the same
  correctly rounded fp32 operations (numpy's float32 ufuncs round to nearest and never fuse),
  and the same conversions (ml_dtypes and numpy round to nearest even, like __float2*_rn).
- ``seed_rms_norm_cpu``: the seed program's own CPU loop (``rms_norm_cpu`` in the C++ source).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .plan import row_split

F32 = np.float32


def _as_2d(x):
    x = np.asarray(x)
    return x.reshape(1, -1) if x.ndim == 1 else x


def rms_norm_ref(x, weight, epsilon, *, gemma=False):
    """float64 RMSNorm of the rows of x: x / sqrt(mean(x^2) + eps) * w (w = 1 + weight for Gemma)."""
    x64 = _as_2d(x).astype(np.float64)
    w64 = np.asarray(weight).astype(np.float64)
    if gemma:
        w64 = 1.0 + w64
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))
    return x64 * inv * w64


def _butterfly(v):
    """The xor-butterfly over the last axis (32 lanes) of pyrms::block_sum, one warp per row of v."""
    lanes = np.arange(32)
    for offset in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ offset]
    return v


def block_sum_twin(partials):
    """pyrms::block_sum over the last axis (length = blockDim.x, a multiple of 32)."""
    rows, block = partials.shape
    warps = _butterfly(partials.reshape(rows, block // 32, 32))[..., 0]
    padded = np.zeros((rows, 32), dtype=F32)
    padded[:, : block // 32] = warps
    return _butterfly(padded)[:, 0]


def sum_squares_twin(xf, block, phase, vec_elems):
    """Per-row fp32 sums of squares in the kernel's order, for rows that all start at `phase`."""
    rows, hidden = xf.shape
    split = row_split(phase * (16 // vec_elems), hidden, 16 // vec_elems)
    sq = xf * xf
    acc = np.zeros((rows, block), dtype=F32)
    threads = np.arange(block)
    acc[:, : split.prefix] = acc[:, : split.prefix] + sq[:, : split.prefix]
    for k in range(-(-split.vectors // block)):
        vec = threads + k * block
        active = threads[vec < split.vectors]
        base = split.prefix + vec[active] * vec_elems
        for j in range(vec_elems):
            acc[:, active] = acc[:, active] + sq[:, base + j]
    acc[:, : split.tail] = acc[:, : split.tail] + sq[:, split.tail_start: split.tail_start + split.tail]
    return block_sum_twin(acc)


def inv_rms_twin(sum_sq, hidden, epsilon):
    """pyrms::inv_rms: 1 / sqrt(sum / n + eps), each step rounded to fp32 (inf for a zero row at eps 0)."""
    with np.errstate(divide="ignore"):
        return F32(1.0) / np.sqrt(sum_sq / F32(hidden) + F32(epsilon))


def scale_twin(xf, inv, weight, dtype, *, gemma=False, round_once=False):
    """rms_scale in rms_norm.cu: the output in storage dtype from fp32 x, per-row inv and weight."""
    dt = dtypes.get(dtype)
    wf = np.asarray(weight).astype(F32)
    if gemma:
        wf = F32(1.0) + wf
    with np.errstate(invalid="ignore"):  # 0 * inf = NaN, as on the GPU
        xn = xf * inv[:, None]
    if not round_once:
        xn = xn.astype(dt.numpy).astype(F32)
    return (xn * wf).astype(dt.numpy)


def rms_norm_twin(x, weight, epsilon, *, block, row_phases=0, gemma=False, round_once=False):
    """Bit-exact twin of rms_norm.cu.

    x: (rows, hidden) in the storage dtype (numpy float16/float32 or ml_dtypes.bfloat16);
    block: the launch's threads per block; row_phases: each input row's position inside its
    16-byte vector, in elements (an int for all rows, or one per row).
    """
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    rows, hidden = x.shape
    phases = np.broadcast_to(np.asarray(row_phases, dtype=np.int64), (rows,))
    xf = x.astype(F32)
    inv = np.empty(rows, dtype=F32)
    for phase in np.unique(phases):
        sel = phases == phase
        inv[sel] = inv_rms_twin(sum_squares_twin(xf[sel], block, int(phase), dt.vec_elems), hidden, epsilon)
    return scale_twin(xf, inv, weight, dt, gemma=gemma, round_once=round_once)


def seed_rms_norm_cpu(x, weight, epsilon):
    """The seed C++ program's CPU reference (``rms_norm_cpu``), reproduced bit for bit.

    A sequential fp32 sum (``np.add.accumulate`` adds strictly left to right, unlike ``np.sum``);
    the host ``rsqrtf`` of CUDA's math_functions.hpp, which is ``(float)(1.0 / sqrt((double)a))``;
    then ``y = x * scale * w`` in fp32, converted to the storage dtype.
    """
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    hidden = xf.shape[1]
    variance = np.add.accumulate(xf * xf, axis=1, dtype=F32)[:, -1]
    scale = (1.0 / np.sqrt((variance / F32(hidden) + F32(epsilon)).astype(np.float64))).astype(F32)
    return (xf * scale[:, None] * np.asarray(weight).astype(F32)).astype(dt.numpy)

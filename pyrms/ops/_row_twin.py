"""The row core's twin: numpy reproductions of the reduction tree and the per-row arithmetic that every
normalizing kernel on cuda_src/row_core.cuh shares (no GPU, no CUDA import). Each op's own twin (its
folder's twin.py) is built on these; pyrms.reference gathers the public ones.

The kernels' fp32 arithmetic is explicit (``__fmul_rn``/``__fadd_rn``, no FMA) and numpy's float32 ufuncs
round to nearest and never fuse, so with the same order of operations the results are the same bits.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ._row_plan import row_split

F32 = np.float32


def _as_2d(x):
    x = np.asarray(x)
    return x.reshape(1, -1) if x.ndim == 1 else x


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
    return thread_sums_twin(xf * xf, block, phase, vec_elems)


def thread_sums_twin(terms, block, phase, vec_elems):
    """Per-row sums of fp32 `terms` (rows, hidden) in the row core's reduction tree (row_core.cuh) for
    a row split at `phase` (elements past a 16-byte boundary) and fold width `block`: fold thread t adds
    its prefix element, then the partial sum of each of its body vectors t, t+block, ... (each vector's
    terms added in element order from 0), then its tail element; then pyrms::block_sum."""
    rows, hidden = terms.shape
    split = row_split(phase * (16 // vec_elems), hidden, 16 // vec_elems)
    acc = np.zeros((rows, block), dtype=F32)
    threads = np.arange(block)
    acc[:, : split.prefix] = acc[:, : split.prefix] + terms[:, : split.prefix]
    for k in range(-(-split.vectors // block)):
        vec = threads + k * block
        active = threads[vec < split.vectors]
        base = split.prefix + vec[active] * vec_elems
        partial = np.zeros((rows, active.size), dtype=F32)
        for j in range(vec_elems):
            partial = partial + terms[:, base + j]
        acc[:, active] = acc[:, active] + partial
    acc[:, : split.tail] = acc[:, : split.tail] + terms[:, split.tail_start: split.tail_start + split.tail]
    return block_sum_twin(acc)


def inv_rms_twin(sum_sq, hidden, epsilon):
    """pyrms::inv_rms: 1 / sqrt(sum / n + eps), each step rounded to fp32 (inf for a zero row at eps 0)."""
    with np.errstate(divide="ignore"):
        return F32(1.0) / np.sqrt(sum_sq / F32(hidden) + F32(epsilon))


def scale_twin(xf, inv, weight, dtype, *, gemma=False, round_once=False, out_dtype=None):
    """rms_scale in rms_norm_row.cuh: the output in storage dtype from fp32 x, per-row inv and weight (of
    the storage dtype or float32: its fp32 value either way; None: no weight, every w = 1).
    out_dtype float32 (bf16/fp16 rows): the final product unrounded; the default rounding's
    intermediate round_T(x * inv) is the storage dtype's all the same (docs/numerics.md). A NaN output (a NaN
    or inf in the row) is the GPU's one NaN (_one_nan)."""
    dt = dtypes.get(dtype)
    wf = np.ones(xf.shape[1], dtype=F32) if weight is None else np.asarray(weight).astype(F32)
    if gemma:
        wf = F32(1.0) + wf
    with np.errstate(invalid="ignore"):  # 0 * inf = NaN, as on the GPU
        xn = xf * inv[:, None]
    if not round_once:
        xn = xn.astype(dt.numpy).astype(F32)
    return _one_nan((xn * wf).astype(_out(dt, out_dtype).numpy))


def _out(dt: dtypes.DType, out_dtype) -> dtypes.DType:
    """The output's dtype: the rows' (None), or float32 beside bf16/fp16 rows (plan.out_kind's rule)."""
    return dtypes.get(out_dtype) if out_dtype is not None else dt


def row_stats_twin(xf, epsilon, block, row_phases, vec_elems, *, centered=False):
    """pyrms::row_stats per row of fp32 xf: (mean, inv), mean = 0 unless centered (LayerNorm).
    row_phases: each row's position inside its 16-byte vector (an int for all rows, or one per row)."""
    rows, hidden = xf.shape
    phases = np.broadcast_to(np.asarray(row_phases, dtype=np.int64), (rows,))
    mean = np.zeros(rows, dtype=F32)
    inv = np.empty(rows, dtype=F32)
    for phase in np.unique(phases):
        sel = phases == phase
        if centered:
            mean[sel] = thread_sums_twin(xf[sel], block, int(phase), vec_elems) / F32(hidden)
            dev = xf[sel] - mean[sel, None]
            inv[sel] = inv_rms_twin(thread_sums_twin(dev * dev, block, int(phase), vec_elems), hidden, epsilon)
        else:
            inv[sel] = inv_rms_twin(sum_squares_twin(xf[sel], block, int(phase), vec_elems), hidden, epsilon)
    return mean, inv


def _one_nan(a: np.ndarray) -> np.ndarray:
    """a with every NaN the GPU's one NaN, in place: its fp32 add returns 0x7FFFFFFF whatever the operands'
    payloads, which bf16 and fp16 keep as 0x7FFF; numpy would carry an operand's payload (and ml_dtypes
    writes 0x7FC0)."""
    nan = np.isnan(a.astype(F32))
    if nan.any():
        word = np.uint16 if a.dtype.itemsize == 2 else np.uint32
        a.view(word)[nan] = word(0x7FFF if word is np.uint16 else 0x7FFFFFFF)
    return a


def rms_ref(x, weight, epsilon, *, gemma=False):
    """float64 RMSNorm of the rows of x: x / sqrt(mean(x^2) + eps) * w (w = 1 + weight for Gemma; 1 for weight
    None): the reference of every op whose rows end in the RMSNorm row (rms_norm_row.cuh)."""
    x64 = _as_2d(x).astype(np.float64)
    w64 = np.float64(1.0) if weight is None else np.asarray(weight).astype(np.float64)
    if gemma:
        w64 = 1.0 + w64
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))
    return x64 * inv * w64


def rms_row_twin(x, weight, epsilon, *, block, row_phases=0, gemma=False, round_once=False, out_dtype=None):
    """Bit-exact twin of the RMSNorm row (rms_norm_row.cuh: the row statistics, then rms_scale) over the rows
    of x in their storage dtype; block: the launch's threads per block; row_phases: each row's position inside
    its 16-byte vector, in elements (an int for all rows, or one per row); out_dtype: float32 for the fp32
    output beside bf16/fp16 rows (scale_twin), None for the rows' dtype."""
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    _, inv = row_stats_twin(xf, epsilon, block, row_phases, dt.vec_elems)
    return scale_twin(xf, inv, weight, dt, gemma=gemma, round_once=round_once, out_dtype=out_dtype)


def fp32_sum(x, residual) -> np.ndarray:
    """The fused residual add's fp32 sum, fp32(x) + fp32(residual) (numpy's float32 add is __fadd_rn), a NaN sum the
    GPU's one NaN (_one_nan)."""
    with np.errstate(invalid="ignore"):  # inf + -inf = NaN, as on the GPU
        return _one_nan(x.astype(F32) + residual.astype(F32))


def rounded_sum(x, residual):
    """The fused add's new residual (vLLM's semantics): round_T(fp32(x) + fp32(residual)), [rows, hidden],
    a NaN sum the GPU's one NaN (_one_nan)."""
    x, residual = _as_2d(x), _as_2d(residual)
    return _one_nan(fp32_sum(x, residual).astype(x.dtype))

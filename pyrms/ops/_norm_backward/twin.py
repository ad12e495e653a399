"""The norm backward's float64 reference and bit-exact twin, RMSNorm's or LayerNorm's (centered: the mean
subtracted), on the row core's twin (pyrms/ops/_row_twin.py); pyrms.reference gathers ``__all__``."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._row_twin import F32, _as_2d, row_stats_twin, thread_sums_twin
from .plan import chunk_rows_for

__all__ = ["norm_backward_ref", "chunk_sums_twin", "sum_partials_twin", "norm_backward_twin"]


def _weight64(weight, gemma=False):
    """A weight as float64 (1 + weight for Gemma), or 1 for None (no weight)."""
    if weight is None:
        return np.float64(1.0)
    return np.asarray(weight).astype(np.float64) + (1.0 if gemma else 0.0)


def norm_backward_ref(dy, x, weight, epsilon, *, centered=False, gemma=False, grad_bias=False):
    """float64 (dx, dweight) of RMSNorm: dx = r * (g - x_hat * mean(x_hat * g)), g = w * dy, x_hat = x * r,
    dweight = sum over rows of dy * x_hat (docs/family.md); centered (LayerNorm): x_hat = (x - mean) * r and
    dx = r * (g - mean(g) - x_hat * mean(x_hat * g)). weight None: g = dy, and no dweight. grad_bias:
    dbias = sum over rows of dy appended (LayerNorm's, or RMSNorm's with a bias)."""
    dy64, x64 = _as_2d(dy).astype(np.float64), _as_2d(x).astype(np.float64)
    xc = x64 - x64.mean(axis=1, keepdims=True) if centered else x64
    inv = 1.0 / np.sqrt(np.mean(xc * xc, axis=1, keepdims=True) + float(epsilon))
    x_hat, g = xc * inv, _weight64(weight, gemma) * dy64
    gc = g - g.mean(axis=1, keepdims=True) if centered else g
    dx = inv * (gc - x_hat * np.mean(x_hat * g, axis=1, keepdims=True))
    dweight = () if weight is None else ((dy64 * x_hat).sum(axis=0),)
    return (dx, *dweight, *((dy64.sum(axis=0),) if grad_bias else ()))


def chunk_sums_twin(terms, chunk_rows):
    """Per chunk of chunk_rows rows: ((0 + t[cC]) + t[cC+1]) + ... in fp32 (norm_backward.cuh)."""
    rows, hidden = terms.shape
    chunks = -(-rows // chunk_rows)
    acc = np.zeros((chunks, hidden), dtype=F32)
    for j in range(chunk_rows):
        index = np.arange(chunks) * chunk_rows + j
        ok = index < rows
        acc[ok] = acc[ok] + terms[index[ok]]
    return acc


def sum_partials_twin(partials):
    """sum_partials_kernel: lane y of 32 sums chunks y, y+32, ... in order; then the lanes in order."""
    chunks, hidden = partials.shape
    lanes = np.zeros((32, hidden), dtype=F32)
    for k in range(-(-chunks // 32)):
        index = k * 32 + np.arange(32)
        ok = index < chunks
        lanes[ok] = lanes[ok] + partials[index[ok]]
    total = np.zeros(hidden, dtype=F32)
    for lane in lanes:
        total = total + lane
    return total


def norm_backward_twin(dy, x, weight, epsilon, *, block, fold, x_phases=0, weight_phase=0, chunk_rows=None,
                       centered=False, gemma=False, grad_dtype=None, rstd=None, grad_bias=False, mean=None):
    """Bit-exact twin of the backward kernels (norm_backward.cuh: RMSNorm's, or LayerNorm's where centered)
    and sum_partials_kernel.

    Returns (dx, dweight) for RMSNorm, (dx, dweight, dbias) for LayerNorm (centered); dx in the storage dtype,
    the parameter gradients in grad_dtype (default: the weight's dtype, or the storage dtype without one).
    The weight may be float32 beside bf16/fp16 rows and dy float32 (both read exactly: the same arithmetic);
    weight_phase is then the weight's phase in vectors of the rows' vec_elems columns (32 bytes). block: the launch's threads per
    block (the tree of the row sums of x_hat * g and g); fold: the statistics' fold width (the forward's
    block, NormBackwardPlan.stats_fold); x_phases: each input row's phase (the statistics' order);
    weight_phase: the weight's (the order of the row sums of x_hat * g and g); chunk_rows: the plan's (None: by
    the row count, dtype and hidden, plan.chunk_rows_for, as the plans make it).
    dy's and dx's alignment and rows_per_block change no arithmetic, so they are not arguments.

    weight None: no weight (the kernels' W = void): g = dy, no dweight, so (dx,) for RMSNorm and (dx,
    dbias) for LayerNorm; the row sums are split as at a 16-byte aligned weight (weight_phase 0, the
    only one allowed), so dx equals a weighted backward's with an aligned weight of ones, bit for bit.

    rstd: the forward's saved inv per row (float32), and for LayerNorm (centered) mean, its saved mean per row,
    used instead of the statistics (fold and x_phases then change nothing). grad_bias: RMSNorm with a bias, its
    dbias (the sum of dy, in the same order) last.
    """
    if (mean is not None) != (centered and rstd is not None):
        raise ValueError("a saved mean goes with a saved rstd, and LayerNorm's (centered) only; got "
                         f"mean={'given' if mean is not None else None}, rstd={'given' if rstd is not None else None}, "
                         f"centered={centered}")
    if weight is None and (gemma or weight_phase):
        raise ValueError(f"weight=None splits its columns at phase 0 and has no gemma; got weight_phase={weight_phase}, "
                         f"gemma={gemma}")
    dy, x = _as_2d(dy), _as_2d(x)
    dt = dtypes.get(x.dtype)
    hidden = x.shape[1]
    xf, dyf = x.astype(F32), dy.astype(F32)
    wf = F32(1.0) if weight is None else np.asarray(weight).astype(F32)
    if gemma:
        wf = F32(1.0) + wf
    if rstd is None:
        mean, inv = row_stats_twin(xf, epsilon, fold, x_phases, dt.vec_elems, centered=centered)
    else:
        rows = x.shape[0]
        mean = np.zeros(rows, F32) if mean is None else np.asarray(mean, dtype=F32).reshape(rows)
        inv = np.asarray(rstd, dtype=F32).reshape(rows)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN rows propagate as on the GPU
        x_hat = ((xf - mean[:, None]) if centered else xf) * inv[:, None]
        g = wf * dyf
        dot_mean = thread_sums_twin(x_hat * g, block, weight_phase, dt.vec_elems) / F32(hidden)
        if centered:
            g = g - thread_sums_twin(g, block, weight_phase, dt.vec_elems)[:, None] / F32(hidden)
        dx = (inv[:, None] * (g - x_hat * dot_mean[:, None])).astype(dt.numpy)
        terms = ([] if weight is None else [dyf * x_hat]) + ([dyf] if centered or grad_bias else [])
    out = dtypes.get(grad_dtype if grad_dtype is not None else dt if weight is None else np.asarray(weight).dtype).numpy
    chunk = chunk_rows or chunk_rows_for(x.shape[0], dt, hidden)
    return (dx, *(sum_partials_twin(chunk_sums_twin(t, chunk)).astype(out) for t in terms))

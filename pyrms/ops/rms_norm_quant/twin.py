"""rms_norm_quant's numpy references and bit-exact twin (on the row core's twin, pyrms/ops/_row_twin.py)."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._quant_twin import abs_max, dynamic_scale, pow2_ceil, quant_rows, quantize
from .._row_twin import F32, _as_2d, _one_nan, row_stats_twin, scale_twin
from .plan import QUANT_GROUPS
from .._rms_row_plan import SUM_PRECISIONS
from .._row_twin import fp32_sum, rounded_sum

__all__ = ["quantize_static", "quantize_per_token", "quantize_per_group", "normalized_twin", "rms_norm_quant_twin", "fused_add_rms_norm_quant_twin"]  # what pyrms.reference gathers

# The output step a quantizing kernel applies to the fp32 normalized values y (after the RMSNorm's
# fp32 arithmetic, before any storage rounding). docs/numerics.md, "Quantized outputs", gives the
# formulas and the vLLM sources each one matches.


def quantize_static(y, scale, out_dtype) -> np.ndarray:
    """One fp32 scale for the whole tensor: q = saturate(round(y / scale)), spelled as vLLM's kernels do.

    float8: ``y * (1/scale)``, the reciprocal an fp32 division (``__fdiv_rn(1, s)``) and the product
    ``__fmul_rn`` (vLLM scaled_fp8_quant_kernel_strided and rms_norm_static_fp8_quant); int8:
    ``y / scale`` (``__fdiv_rn``, vLLM static_scaled_int8_quant_kernel). scale is rounded to float32
    first (the kernel reads an fp32 scale); it must be finite and > 0 (ValueError otherwise).
    """
    qt = dtypes.quantized(out_dtype)
    y = quant_rows(y)
    s = F32(scale)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a finite float32 > 0, got {scale!r} (float32 {s!r})")
    return quantize(y, s, qt, divide=qt.integer)


def quantize_per_token(y, out_dtype, scale_ub=None) -> tuple[np.ndarray, np.ndarray]:
    """One fp32 scale per row from its absolute maximum: (q, scales[rows]).

    amax = fmaxf over |y| (NaN skipped); with scale_ub, amax = fminf(amax, scale_ub) (fp8 only, as vLLM
    refuses scale_ub for int8); scale = fmaxf(amax / qmax, min_scale), min_scale = 1/(qmax*512) for fp8
    and FLT_EPSILON for int8. Then fp8: ``y / scale`` (``__fdiv_rn``); int8: ``y * (1/scale)``, the
    reciprocal ``__fdiv_rn(1, scale)`` (vLLM rms_norm_dynamic_per_token_quant). scales are the divisors
    written out, so ``q * scale`` dequantizes.
    """
    qt = dtypes.quantized(out_dtype)
    y = quant_rows(y)
    amax = abs_max(y, axis=1)
    if scale_ub is not None:
        if qt.integer:
            raise ValueError("scale_ub applies to float8 outputs only (as in vLLM), not int8")
        ub = F32(scale_ub)
        if not (np.isfinite(ub) and ub > 0):
            raise ValueError(f"scale_ub must be a finite float32 > 0, got {scale_ub!r}")
        amax = np.fmin(amax, ub)
    scales = dynamic_scale(amax, qt)
    return quantize(y, scales[:, None], qt, divide=not qt.integer), scales


def quantize_per_group(y, out_dtype, group, ue8m0=False, column_major=False) -> tuple[np.ndarray, np.ndarray]:
    """One fp32 scale per `group` consecutive elements of a row: (q, scales[rows, hidden // group]).

    group is 64 or 128 and must divide hidden (ValueError otherwise: a ragged last group has no vLLM peer).
    Each group's scale is per-token's formula on that group (no scale_ub); with ue8m0 it is then rounded
    up to a power of two (DeepSeek's UE8M0 scales, vLLM per_token_group_quant ``scale_ue8m0``), and the
    division by it is exact. The element step is per-token's (fp8 divides, int8 multiplies by the
    reciprocal). scales has the logical shape (rows, groups) either way; column_major: its memory is
    (groups, rows) row-major (``scales.T`` is C-contiguous), vLLM's transposed scale layout.
    """
    qt = dtypes.quantized(out_dtype)
    y = quant_rows(y)
    rows, hidden = y.shape
    if group not in QUANT_GROUPS:
        raise ValueError(f"group must be one of {QUANT_GROUPS}, got {group!r}")
    if hidden % group:
        raise ValueError(f"group {group} does not divide hidden {hidden}")
    grouped = y.reshape(rows, hidden // group, group)
    scales = dynamic_scale(abs_max(grouped, axis=2), qt)
    if ue8m0:
        scales = pow2_ceil(scales)
    q = quantize(grouped, scales[..., None], qt, divide=not qt.integer).reshape(rows, hidden)
    return q, (np.ascontiguousarray(scales.T).T if column_major else scales)


def normalized_twin(x, weight, epsilon, *, block, row_phases=0, round_input=False, dtype=None) -> np.ndarray:
    """The fp32 values rms_norm_quant.cu quantizes (its `normalized`): (x * inv_rms) * w in fp32, or with
    round_input the plain forward's output (the seed's rounding: round(round(x * inv_rms) * w)) as fp32 (vLLM's).
    x: (rows, hidden) in the storage dtype, or float32 values of rows of another storage ``dtype`` (the fused
    add's fp32 sums, FP32_SUM: split and rounded as that dtype's rows); weight of the storage dtype; block and
    row_phases as the row core's twin (_row_twin.row_stats_twin)."""
    x = _as_2d(x)
    dt = dtypes.get(x.dtype if dtype is None else dtype)
    xf = x.astype(F32)
    _, inv = row_stats_twin(xf, epsilon, block, row_phases, dt.vec_elems)
    if round_input:
        return scale_twin(xf, inv, weight, dt).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf = NaN, as on the GPU
        return (xf * inv[:, None]) * np.asarray(weight).astype(F32)


def rms_norm_quant_twin(x, weight, epsilon, out_dtype, *, block, row_phases=0, mode="static", scale=None,
                        scale_ub=None, round_input=False, group=128, ue8m0=False,
                        dtype=None) -> tuple[np.ndarray, np.ndarray | None]:
    """Bit-exact twin of rms_norm_quant_kernel (and of the group kernel): (q, per-row scales, (rows, groups)
    scales, or None for static): normalized_twin (dtype: as there), then quantize_static(y, scale),
    quantize_per_token(y, scale_ub) or quantize_per_group(y, group, ue8m0) (no scale_ub)."""
    y = normalized_twin(x, weight, epsilon, block=block, row_phases=row_phases, round_input=round_input, dtype=dtype)
    if mode == "static":
        return quantize_static(y, scale, out_dtype), None
    if mode == "per_token":
        return quantize_per_token(y, out_dtype, scale_ub)
    if mode == "per_group":
        if scale_ub is not None:
            raise ValueError("scale_ub applies to mode='per_token' only")
        return quantize_per_group(y, out_dtype, group, ue8m0)
    raise ValueError(f"mode must be 'static', 'per_token' or 'per_group', got {mode!r}")


def fused_add_rms_norm_quant_twin(x, residual, weight, epsilon, out_dtype, *, block, residual_phases=0,
                                  input_phases=0, sum_precision="rounded", **options):
    """Bit-exact twin of fused_add_rms_norm_quant_kernel: (q, scales or None, new residual), quantized as
    rms_norm_quant_twin (options: its mode, scale, ...).

    sum_precision "rounded" (vLLM's): the rounded sum (fused_add_rms_norm_twin's) is stored and normalized, the
    sum of squares split at the residual's phases. "fp32" (FP32_SUM, FlashInfer's fused_add_rmsnorm_quant): the
    fp32 sum is normalized and quantized, split at the input's phases, and stored rounded to the dtype. A
    float32 x has one semantics: both are the first. A NaN sum is stored as the GPU's one NaN."""
    if sum_precision not in SUM_PRECISIONS:
        raise ValueError(f"sum_precision must be one of {SUM_PRECISIONS}, got {sum_precision!r}")
    x, residual = _as_2d(x), _as_2d(residual)
    if sum_precision == "rounded" or x.dtype == F32:
        total = rounded_sum(x, residual)
        q, scales = rms_norm_quant_twin(total, weight, epsilon, out_dtype, block=block, row_phases=residual_phases,
                                        **options)
        return q, scales, total
    sums = fp32_sum(x, residual)
    q, scales = rms_norm_quant_twin(sums, weight, epsilon, out_dtype, block=block, row_phases=input_phases,
                                    dtype=x.dtype, **options)
    return q, scales, _one_nan(sums.astype(x.dtype))

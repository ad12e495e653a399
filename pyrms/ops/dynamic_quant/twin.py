"""dynamic_quant's float64 reference (vLLM's formulas) and bit-exact twin (on the quantizing kernels' shared
output step, pyrms/ops/_quant_twin.py)."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._quant_twin import abs_max, dynamic_scale, pow2_ceil, quantize
from .._row_twin import F32, _as_2d
from .plan import GROUP_EPS, plan_dynamic_quant, scale_floor

__all__ = ["dynamic_quant_ref", "dynamic_quant_twin"]  # what pyrms.reference gathers


def _rows(x) -> tuple[np.ndarray, np.ndarray]:
    """(x as (rows, hidden), its fp32 values); ValueError for a dtype the kernel does not take."""
    x = _as_2d(x)
    dtypes.get(x.dtype)
    return x, x.astype(F32)


def _check_ub(scale_ub, mode: str, qt: dtypes.QuantDType) -> np.float32:
    """scale_ub as float32 (+inf for None); ValueError where the mode or output dtype takes none (vLLM's rules),
    or for a bound that is not finite and > 0."""
    if scale_ub is None:
        return F32(np.inf)
    if mode != "per_token" or qt.integer:
        raise ValueError(f"scale_ub applies to mode='per_token' with a float8 output only (as in vLLM), not "
                         f"{mode!r} to {qt.name}")
    ub = F32(scale_ub)
    if not (np.isfinite(ub) and ub > 0):
        raise ValueError(f"scale_ub must be a finite float32 > 0, got {scale_ub!r}")
    return ub


def dynamic_quant_twin(x, out_dtype, mode: str, *, scale_ub=None, group_size=None, ue8m0=False,
                       column_major=False) -> tuple[np.ndarray, np.ndarray]:
    """Bit-exact twin of dynamic_quant.cu: (q, scales) of x (rows, hidden) (or one row) of bfloat16, float16 or
    float32, whose conversion to fp32 is exact.

    amax: the fmaxf maximum of |x| (NaN skipped) over the tensor, each row or each group; s = fmaxf(amax' / qmax,
    floor) with plan.scale_floor's floor (amax' = fminf(amax, scale_ub) per token, float8 only); then per
    tensor ``x * (1/s)``, per token float8 and per group ``x / s``, per token int8 ``x * (127 / amax)`` (0 for
    an all-zero row); per group with ue8m0, s = pow2_ceil(fmaxf(s, 1e-10)). The conversions are quant.cuh's
    (fp8 saturates, NaN the one positive NaN; int8 rounds to nearest even, NaN -> 0). scales: (1,) per tensor,
    (rows,) per token, (rows, groups) per group (column_major: its memory (groups, rows), as the kernel writes
    column-major scales)."""
    x, xf = _rows(x)
    qt = dtypes.quantized(out_dtype)
    rows, hidden = xf.shape
    p = plan_dynamic_quant(x.dtype, hidden, qt, mode, group_size)
    ub, floor = _check_ub(scale_ub, mode, qt), scale_floor(mode, qt)
    if (ue8m0 or column_major) and mode != "per_group":
        raise ValueError(f"ue8m0 and column_major apply to mode='per_group' only, not {mode!r}")
    if mode == "per_tensor":
        s = dynamic_scale(abs_max(xf, axis=None), qt, floor)
        return quantize(xf, s, qt, divide=False), np.array([s], F32)
    if mode == "per_token":
        amax = abs_max(xf, axis=1)
        s = dynamic_scale(np.fmin(amax, ub), qt, floor)
        if qt.integer:
            with np.errstate(divide="ignore"):
                factor = np.where(amax == 0, F32(0.0), qt.qmax / amax).astype(F32)
            return quantize(xf, factor[:, None], qt, divide=False, reciprocal=False), s
        return quantize(xf, s[:, None], qt, divide=True), s
    grouped = xf.reshape(rows, hidden // p.group_size, p.group_size)
    s = dynamic_scale(abs_max(grouped, axis=2), qt, floor)
    if ue8m0:
        s = pow2_ceil(np.fmax(s, GROUP_EPS))
    q = quantize(grouped, s[..., None], qt, divide=True).reshape(rows, hidden)
    return q, (np.ascontiguousarray(s.T).T if column_major else s)


def _f32(v) -> np.ndarray:
    """A float64 result rounded to float32, back in float64: one correctly rounded fp32 operation of fp32
    operands (53 >= 2 * 24 + 2 bits, so the double rounding is innocuous)."""
    return np.asarray(v, np.float64).astype(F32).astype(np.float64)


def dynamic_quant_ref(x, out_dtype, mode: str, *, scale_ub=None, group_size=None,
                      ue8m0=False) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's formulas in float64, each of its fp32 operations rounded to fp32: (q as float64 values on the
    output grid before the cast, scales). For finite inputs whose maxima are > 0 (vLLM writes NaN or qmax for the
    rest):

    - per_tensor (scaled_fp8_quant, no scale): s = amax / qmax; q = clamp(x * (1 / s)).
    - per_token float8 (scaled_fp8_quant, use_per_token_if_dynamic): s = max(min(amax, scale_ub) / qmax,
      1 / (qmax * 512)); q = clamp(x / s).
    - per_token int8 (scaled_int8_quant, no scale): s = amax / 127; q = rint(x * (127 / amax)), clamped.
    - per_group (per_token_group_quant_fp8, eps 1e-10): s = max(amax, eps) / qmax, with ue8m0
      2^ceil(log2(max(s, 1e-10))); q = clamp(x / s). int8: rounded to nearest even here and in pyrms, where vLLM's
      per_token_group_quant_int8 truncates.

    The rounding to the float8 grid is left to ml_dtypes (exact: the values are clamped first)."""
    qt = dtypes.quantized(out_dtype)
    x = _as_2d(x).astype(np.float64)
    qmax = float(qt.qmax)
    if mode == "per_tensor":
        s = _f32(np.max(np.abs(x)) / qmax)
        z = _f32(x * _f32(1.0 / s))
        scales = np.array([s])
    elif mode == "per_token":
        amax = np.max(np.abs(x), axis=1)
        if qt.integer:
            scales = _f32(amax / qmax)
            z = _f32(x * _f32(qmax / amax)[:, None])
        else:
            bound = amax if scale_ub is None else np.minimum(amax, float(F32(scale_ub)))
            scales = np.maximum(_f32(bound / qmax), float(qt.min_scale))
            z = _f32(x / scales[:, None])
    elif mode == "per_group":
        g = 128 if group_size is None else group_size
        rows, hidden = x.shape
        amax = np.max(np.abs(x.reshape(rows, hidden // g, g)), axis=2)
        scales = _f32(np.maximum(amax, float(GROUP_EPS)) / qmax)
        if ue8m0:
            scales = np.exp2(np.ceil(np.log2(np.maximum(scales, float(GROUP_EPS)))))
        z = _f32(x / np.repeat(scales, g, axis=1))
    else:
        raise ValueError(f"mode must be 'per_tensor', 'per_token' or 'per_group', got {mode!r}")
    if qt.integer:
        z = np.rint(z)
    return np.clip(z, float(qt.qmin), qmax), scales

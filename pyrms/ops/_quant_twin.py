"""The quantizing kernels' output step in numpy, bit for bit (cuda_src/quant.cuh), shared by the twins of the
ops that quantize (rms_norm_quant's, static_quant's, dynamic_quant's): an fp32 value's conversion through a
scale, the fmaxf maximum of magnitudes, the dynamic scale and the power-of-two rounding of UE8M0 scales."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ._row_twin import F32, _as_2d


def quant_rows(y) -> np.ndarray:
    """y as a (rows, hidden) float32 array; TypeError for another dtype, which would hide a rounding."""
    y = _as_2d(y)
    if y.dtype != F32 or y.ndim != 2:
        raise TypeError(f"y must be a float32 array of shape (rows, hidden), got {y.dtype} {y.shape}")
    return y


def quantize(y: np.ndarray, factor: np.ndarray, qt: dtypes.QuantDType, *, divide: bool,
             reciprocal: bool = True) -> np.ndarray:
    """q = convert(y / factor) (divide), else convert(y * (1/factor)), or with reciprocal=False
    convert(y * factor); factor broadcast against y, each step one fp32 operation.

    fp8: clamp to [-qmax, qmax], then round to nearest even; NaN stays NaN (the canonical positive NaN,
    ml_dtypes' float32 NaN conversion); the clamp makes ±inf and finite overflow ±qmax (cvt's satfinite).
    int8: round to nearest even, then clamp to [-128, 127]; NaN becomes 0 (cvt.rni.sat.s8.f32).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf/inf and 0*inf: NaN, as on the GPU
        if divide:
            z = y / factor
        else:
            z = y * (F32(1.0) / factor if reciprocal else factor)
        if qt.integer:
            z = np.clip(np.rint(z), qt.qmin, qt.qmax)
            z = np.where(np.isnan(z), F32(0.0), z)  # numpy's NaN -> int8 cast is undefined
        else:
            z = np.clip(z, qt.qmin, qt.qmax)  # np.clip keeps NaN; ml_dtypes would turn >= 480 into NaN
            z = np.where(np.isnan(z), F32(np.nan), z)  # drop NaN's sign: the kernel writes one NaN pattern
    return z.astype(qt.numpy)


def abs_max(y: np.ndarray, axis) -> np.ndarray:
    """fmaxf-reduction of |y| from 0: NaN is skipped (fmaxf returns the other operand), and the maximum is
    exact, so the reduction order of the kernel does not matter."""
    return np.fmax.reduce(np.abs(y), axis=axis, initial=F32(0.0))


def dynamic_scale(amax: np.ndarray, qt: dtypes.QuantDType, floor=None) -> np.ndarray:
    """fmaxf(amax / qmax, floor), both fp32 operations; floor: qt.min_scale where None (vLLM's fused
    per-token/per-block kernels)."""
    return np.fmax(amax / qt.qmax, qt.min_scale if floor is None else F32(floor))


def pow2_ceil(s: np.ndarray) -> np.ndarray:
    """The power of two at or above each positive float32 s (ue8m0): the exponent is raised by one when the
    mantissa is not zero, which is exp2f(ceilf(log2f(s))) bit for bit for normal s (and keeps inf)."""
    bits = s.view(np.uint32)
    exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
    exponent = exponent + ((bits & np.uint32(0x7FFFFF)) != 0).astype(np.uint32)
    return (exponent << np.uint32(23)).view(F32)

"""gated_rms_norm's float64 reference and bit-exact numpy twin (on the row core's twin, pyrms/ops/_row_twin.py).

Both take x and z as 2-D arrays [rows, hidden] of one storage dtype and a weight [hidden] (None: no weight) and
return [rows, hidden]: the reference in float64, the twin in the storage dtype."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._fma_twin import fma32
from .._row_twin import F32, _as_2d, _one_nan, row_stats_twin
from .plan import group_size_arg, plan_gated_rms_norm

__all__ = ["gated_rms_norm_ref", "gated_rms_norm_twin", "silu_twin"]  # what pyrms.reference gathers

# gate_exp's constants in cuda_src/gated_rms_norm.cu, as the same fp32 values
_LOG2E = F32(float.fromhex("0x1.715476p+0"))
_SHIFTER = F32(float.fromhex("0x1.8p+23"))
_LN2_HI = F32(float.fromhex("0x1.62e430p-1"))
_LN2_LO = F32(float.fromhex("-0x1.05c610p-29"))
_TAYLOR = tuple(F32(float.fromhex(c)) for c in ("0x1.a01a02p-12", "0x1.6c16c2p-9", "0x1.111112p-6",
                                                "0x1.555556p-4", "0x1.555556p-2", "0x1p+0", "0x1p+1", "0x1p+1"))


def _gate_exp(a: np.ndarray) -> np.ndarray:
    """gate_exp of the kernel, element by element: a raised to -86 at least (np.fmax drops NaN as fmaxf does),
    then p * 2^(k - 1) with p = 2 exp(r) (the Taylor coefficients doubled), each fused multiply-add rounded once
    (fma32). Meant for a <= 87; above, its values are not used."""
    a = np.fmax(np.asarray(a, F32), F32(-86.0))
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = fma32(a, _LOG2E, _SHIFTER)
        kf = shifted - _SHIFTER
        k = shifted.view(np.int32) - np.int32(0x4B400000)
        r = fma32(-kf, _LN2_LO, fma32(-kf, _LN2_HI, a))
        p = np.full_like(r, _TAYLOR[0])
        for c in _TAYLOR[1:]:
            p = fma32(p, r, c)
        return p * ((k + 126) << 23).astype(np.int32).view(F32)


def silu_twin(z) -> np.ndarray:
    """The kernel's silu in fp32, bit for bit: z * (1 / (1 + gate_exp(-z))), each operation rounded to fp32 (the
    reciprocal correctly rounded, as the kernel's for 1 + exp(-z) below 2^126), the sigmoid 0 where -z > 87."""
    zf = np.asarray(z).astype(F32)
    a = -zf
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sigmoid = np.where(a > F32(87.0), F32(0.0), F32(1.0) / (F32(1.0) + _gate_exp(a)))
        return zf * sigmoid


def _weight(weight, hidden: int, dtype) -> np.ndarray:
    return np.ones(hidden, dtype) if weight is None else np.asarray(weight).astype(dtype)


def gated_rms_norm_ref(x, z, weight, epsilon=1e-6, *, group_size=None, norm_before_gate=True) -> np.ndarray:
    """float64 gated RMSNorm as mamba_ssm's rmsnorm_fn spells it (no bias): silu(z) = z * sigmoid(z); the gate
    first (``norm_before_gate=False``): x = x * silu(z); then per group of ``group_size`` columns
    x / sqrt(mean(x^2) + eps), times the weight, times silu(z) where ``norm_before_gate``."""
    x64, z64 = _as_2d(x).astype(np.float64), _as_2d(z).astype(np.float64)
    rows, hidden = x64.shape
    gs = group_size_arg(group_size, hidden)
    with np.errstate(over="ignore", invalid="ignore"):
        silu = z64 * (1.0 / (1.0 + np.exp(-z64)))
        if not norm_before_gate:
            x64 = x64 * silu
        xg = x64.reshape(rows, hidden // gs, gs)
        rstd = 1.0 / np.sqrt(np.mean(xg * xg, axis=-1, keepdims=True) + float(epsilon))
        y = (xg * rstd).reshape(rows, hidden) * _weight(weight, hidden, np.float64)
        return y * silu if norm_before_gate else y


def gated_rms_norm_twin(x, z, weight, epsilon=1e-6, *, group_size=None, norm_before_gate=True,
                        row_phases=0) -> np.ndarray:
    """Bit-exact twin of gated_rms_norm_kernel: x and z (bfloat16, float16 or float32, [rows, hidden]), the weight
    [hidden] of x's dtype or float32 (None: none). Each (row, group) is an RMSNorm row of group_size elements: its
    sum of squares (of x, or of x * silu(z) with the gate first) in the row core's tree for the plan's fold at the
    group's alignment (``row_phases``: each row's first element's position inside its 16-byte vector, in
    elements; an int for every row, or one per row); then in fp32 ((x * inv) * w) * silu(z), or (gx * inv) * w, and
    one rounding to the storage dtype. NaN results are the GPU's one NaN."""
    x, z = _as_2d(x), _as_2d(z)
    if z.shape != x.shape or z.dtype != x.dtype:
        raise ValueError(f"z must be of x's shape {x.shape} and dtype {x.dtype}, got {z.shape} {z.dtype}")
    dt = dtypes.get(x.dtype)
    rows, hidden = x.shape
    gs = group_size_arg(group_size, hidden)
    groups = hidden // gs
    w = None if weight is None else np.asarray(weight)
    plan = plan_gated_rms_norm(dt, gs, norm_before_gate=norm_before_gate,
                               weight_dtype="none" if w is None else w.dtype)  # ValueError for what it refuses
    silu = silu_twin(z)
    with np.errstate(invalid="ignore", over="ignore"):
        v = x.astype(F32) if norm_before_gate else x.astype(F32) * silu
    phases = np.broadcast_to(np.asarray(row_phases, np.int64), (rows,))[:, None] + np.arange(groups) * gs
    _, inv = row_stats_twin(v.reshape(rows * groups, gs), epsilon, plan.block, (phases % dt.vec_elems).ravel(),
                            dt.vec_elems)
    wf = _weight(w, hidden, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v.reshape(rows, groups, gs) * inv.reshape(rows, groups, 1)).reshape(rows, hidden) * wf
        if norm_before_gate:
            y = y * silu
    return _one_nan(y.astype(dt.numpy))

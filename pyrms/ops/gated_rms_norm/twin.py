"""gated_rms_norm's float64 references and bit-exact numpy twins, forward and backward (on the row core's twin,
pyrms/ops/_row_twin.py, and the norm backward's sums, pyrms/ops/_norm_backward/twin.py).

Each takes x and z as 2-D arrays [rows, hidden] of one storage dtype and a weight [hidden] (None: no weight); the
forward returns [rows, hidden], the backward (dx, dz, dweight): the references in float64, the twins in the kernels'
dtypes."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._fma_twin import fma32
from .._norm_backward.twin import chunk_sums_twin, sum_partials_twin
from .._row_twin import F32, _as_2d, _one_nan, row_stats_twin, thread_sums_twin
from .plan import group_size_arg, plan_gated_rms_norm, plan_gated_rms_norm_backward

__all__ = ["gated_rms_norm_ref", "gated_rms_norm_twin", "silu_twin", "sigmoid_twin", "gated_rms_norm_backward_ref",
           "gated_rms_norm_backward_twin"]  # what pyrms.reference gathers

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


def sigmoid_twin(z) -> np.ndarray:
    """The kernels' sigmoid in fp32, bit for bit (gate.cuh): 1 / (1 + gate_exp(-z)), each operation rounded to fp32
    (the reciprocal correctly rounded, as the kernel's for 1 + exp(-z) below 2^126), 0 where -z > 87."""
    a = -np.asarray(z).astype(F32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return np.where(a > F32(87.0), F32(0.0), F32(1.0) / (F32(1.0) + _gate_exp(a)))


def silu_twin(z) -> np.ndarray:
    """The kernels' silu in fp32, bit for bit: z * sigmoid_twin(z)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(z).astype(F32) * sigmoid_twin(z)


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


def gated_rms_norm_backward_ref(dy, x, z, weight, epsilon=1e-6, *, group_size=None, norm_before_gate=True):
    """float64 (dx, dz, dweight) of gated_rms_norm_ref's function for the upstream gradient dy (dweight None without
    a weight). Per group, with s = silu(z), v = x (or x * s with the gate first), r = 1 / sqrt(mean(v^2) + eps),
    n = v * r, dn = dy * w (* s, norm first), dv = r * (dn - n * mean(dn * n)); norm first: dx = dv,
    ds = dy * n * w, dweight = sum over rows of dy * n * s; gate first: dx = dv * s, ds = dv * x, dweight = sum of
    dy * n; dz = ds * silu'(z), silu'(z) = sigmoid(z) * (1 + z * (1 - sigmoid(z)))."""
    dy64, x64, z64 = (_as_2d(a).astype(np.float64) for a in (dy, x, z))
    rows, hidden = x64.shape
    gs = group_size_arg(group_size, hidden)
    w64 = _weight(weight, hidden, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sg = 1.0 / (1.0 + np.exp(-z64))
        s = z64 * sg
        v = (x64 if norm_before_gate else x64 * s).reshape(rows, -1, gs)
        r = 1.0 / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + float(epsilon))
        n = v * r
        dn = (dy64 * w64 * s if norm_before_gate else dy64 * w64).reshape(rows, -1, gs)
        dv = (r * (dn - n * np.mean(dn * n, axis=-1, keepdims=True))).reshape(rows, hidden)
        n = n.reshape(rows, hidden)
        if norm_before_gate:
            dx, ds, dw = dv, dy64 * n * w64, dy64 * n * s
        else:
            dx, ds, dw = dv * s, dv * x64, dy64 * n
        dz = ds * (sg * (1.0 + z64 * (1.0 - sg)))
    return dx, dz, None if weight is None else dw.sum(axis=0)


def gated_rms_norm_backward_twin(dy, x, z, weight, epsilon=1e-6, *, group_size=None, norm_before_gate=True,
                                 row_phases=0, weight_phase=0, chunk_rows=None):
    """Bit-exact twin of gated_rms_norm_backward_kernel and its sums over rows: (dx, dz, dweight), dx and dz in the
    storage dtype, dweight in the weight's (None without a weight). dy, x and z: [rows, hidden] of one dtype.

    Per (row, group), as the kernel (cuda_src/gated_rms_norm_backward.cu) spells it: s = silu(z) and
    s' = sigmoid * (1 + z * (1 - sigmoid)) from sigmoid_twin; v = x or x * s; inv the forward's (its tree for the
    fold at the group's alignment in x, ``row_phases``: each row's first element's position in its 16-byte vector,
    as gated_rms_norm_twin takes it); g = w * (dy * s) or w * dy; the row sum of (v * inv) * g in the tree of the
    backward's block at the weight's split (``weight_phase``: the weight's position in its vector of the rows' vector
    width, as the norm backward's twin takes it); dv = inv * (g - v_hat * mean); then dx, dz and the dweight terms
    (dy * s) * v_hat or dy * v_hat, summed as norm_backward.cuh sums them (chunk_rows: the plan's by the row count
    where None). NaN results are the GPU's one NaN."""
    dy, x, z = _as_2d(dy), _as_2d(x), _as_2d(z)
    if not (x.shape == z.shape == dy.shape and x.dtype == z.dtype == dy.dtype):
        raise ValueError(f"dy, x and z must be of one shape and dtype, got {dy.shape} {dy.dtype}, {x.shape} {x.dtype}, "
                         f"{z.shape} {z.dtype}")
    dt = dtypes.get(x.dtype)
    rows, hidden = x.shape
    gs = group_size_arg(group_size, hidden)
    groups, n = hidden // gs, dt.vec_elems
    w = None if weight is None else np.asarray(weight)
    plan = plan_gated_rms_norm_backward(dt, hidden, gs, norm_before_gate=norm_before_gate,
                                        weight_dtype="none" if w is None else w.dtype)
    sg = sigmoid_twin(z)
    zf, xf, dyf = z.astype(F32), x.astype(F32), dy.astype(F32)
    wf = _weight(w, hidden, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        s = zf * sg
        ds = sg * (F32(1.0) + zf * (F32(1.0) - sg))
        v = xf if norm_before_gate else xf * s
        gin = dyf * s if norm_before_gate else dyf
    phases = np.broadcast_to(np.asarray(row_phases, np.int64), (rows,))[:, None] + np.arange(groups) * gs
    _, inv = row_stats_twin(v.reshape(rows * groups, gs), epsilon, plan.fold, (phases % n).ravel(), n)
    inv = np.repeat(inv.reshape(rows, groups), gs, axis=1)
    with np.errstate(invalid="ignore", over="ignore"):
        v_hat = v * inv
        g = wf * gin
        dot = np.empty((rows, groups), F32)
        for k in range(groups):  # each group's row sum at its own phase in the weight's split
            cols = slice(k * gs, (k + 1) * gs)
            dot[:, k] = thread_sums_twin(v_hat[:, cols] * g[:, cols], plan.block, (weight_phase + k * gs) % n, n)
        dot_mean = np.repeat(dot / F32(gs), gs, axis=1)
        dv = inv * (g - v_hat * dot_mean)
        if norm_before_gate:
            dx, dz = dv, (dyf * (v_hat * wf)) * ds
        else:
            dx, dz = dv * s, (dv * xf) * ds
        terms = gin * v_hat
    dweight = None
    if w is not None:
        chunk = chunk_rows or plan.chunk_for(rows)
        dweight = _one_nan(sum_partials_twin(chunk_sums_twin(terms, chunk)).astype(plan.grad_dtype.numpy))
    return _one_nan(dx.astype(dt.numpy)), _one_nan(dz.astype(dt.numpy)), dweight

"""fp32 fused multiply-add in numpy, bit for bit the GPU's ``__fmaf_rn``: ``a * b + c`` rounded once to fp32.

numpy has no fma. The product of two fp32 values is exact in float64 (48 significant bits), so only the addition
rounds there, and rounding that float64 sum ``s`` to fp32 rounds twice. That second rounding can differ from the
single one only where ``s`` lies exactly halfway between two fp32 values while the exact sum does not: the exact
sum is then ``s + err`` (TwoSum's error, exact), and the fp32 neighbour on err's side of ``s`` is the answer."""
from __future__ import annotations

import numpy as np

F32 = np.float32

__all__ = ["fma32"]


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` of fp32 values (arrays broadcast together), rounded once to nearest even, as the GPU's fmaf:
    subnormal results kept, an overflow inf, NaN where an operand is NaN or inf * 0 (then of any payload)."""
    a64, b64, c64 = (np.asarray(v, F32).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64  # exact
        s = p + c64
        bv = s - p
        err = (p - (s - bv)) + (c64 - bv)  # TwoSum: s + err == p + c exactly, for finite s
        r = np.asarray(s.astype(F32))
        r64 = r.astype(np.float64)
        # The fp32 neighbours around s; past FLT_MAX the upper one stands for 2^128, where rounding overflows.
        other = np.where(s > r64, np.nextafter(r, F32(np.inf)), np.nextafter(r, F32(-np.inf)))
        other64 = np.where(np.isinf(other) & np.isfinite(r), np.copysign(2.0 ** 128, r64), other.astype(np.float64))
        r_inf = np.isinf(r) & np.isfinite(s)  # s rounded up to inf: its lower neighbour is FLT_MAX
        lower = np.where(r_inf, np.copysign(np.float64(np.finfo(F32).max), s), r64)
        upper = np.where(r_inf, np.copysign(2.0 ** 128, s), other64)
        halfway = np.isfinite(s) & (err != 0) & np.isfinite(err) & ((lower + upper) * 0.5 == s)
        # s halfway: the exact sum is on err's side of s, so the answer is the neighbour on that side.
        below, above = np.minimum(lower, upper), np.maximum(lower, upper)
        fixed = np.where(err > 0, above, below)
        return np.where(halfway, fixed.astype(F32), r).astype(F32)

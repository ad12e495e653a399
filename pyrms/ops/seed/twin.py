"""seed's numpy references and bit-exact twin (on the row core's twin, pyrms/ops/_row_twin.py)."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._row_twin import F32, _as_2d

__all__ = ["seed_rms_norm_cpu"]  # what pyrms.reference gathers


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

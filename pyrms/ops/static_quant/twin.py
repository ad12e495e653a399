"""static_quant's numpy references and bit-exact twin: rms_norm_quant's static output step
(pyrms/ops/rms_norm_quant/twin.py, quantize_static) applied to the input as fp32."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._row_twin import F32, _as_2d
from ..rms_norm_quant.twin import quantize_static

__all__ = ["static_quant_twin"]  # what pyrms.reference gathers


def static_quant_twin(x, scale, out_dtype) -> np.ndarray:
    """Bit-exact twin of static_quant_kernel: ``quantize_static(float32(x), scale, out_dtype)``.

    x: (rows, hidden) (or one row) of bfloat16, float16 or float32, whose conversion to fp32 is exact;
    scale: a float (rounded to float32 first, finite and > 0: ValueError otherwise). float8: ``x * (1/s)``,
    the reciprocal one fp32 division, then saturate to ±qmax (±inf too), round to nearest even, NaN the one
    positive NaN; int8: ``x / s``, round to nearest even, saturate to [-128, 127], NaN -> 0 (vLLM's
    static_scaled_fp8_quant and static_scaled_int8_quant)."""
    x = _as_2d(x)
    dtypes.get(x.dtype)  # ValueError for a dtype the kernel does not take
    return quantize_static(x.astype(F32), scale, out_dtype)

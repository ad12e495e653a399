"""fused_add_rms_norm's numpy references and bit-exact twin (on the row core's twin, pyrms/ops/_row_twin.py)."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._row_twin import (F32, _as_2d, _one_nan, _out, fp32_sum, rms_ref, rms_row_twin, rounded_sum, row_stats_twin,
                         scale_twin)

__all__ = ["fused_add_rms_norm_ref", "rounded_sum", "fused_add_rms_norm_twin"]  # what pyrms.reference gathers


def fused_add_rms_norm_ref(x, residual, weight, epsilon, *, gemma=False):
    """float64: (RMSNorm(x + residual), x + residual), the sum not rounded."""
    total = _as_2d(x).astype(np.float64) + _as_2d(residual).astype(np.float64)
    return rms_ref(total, weight, epsilon, gemma=gemma), total


def fused_add_rms_norm_twin(x, residual, weight, epsilon, *, block, residual_phases=0, input_phases=0, gemma=False,
                            round_once=False, sum_precision="rounded", out_dtype=None):
    """Bit-exact twin of fused_add_rms_norm.cu: (new input, new residual), each in its own dtype.

    sum_precision "rounded" (fused_add_rms_norm_kernel, vLLM's): the sum rounded to the dtype is stored
    and normalized, with the sum of squares split at the residual's phases. "fp32"
    (fused_add_rms_norm_fp32_sum_kernel: FlashInfer's, SGLang's; with a float32 residual beside bf16 or
    fp16 rows, QuACK's and Transformer Engine's): the fp32 sum (numpy's float32 add is __fadd_rn) is
    normalized, split at the input's phases, and stored in the residual's dtype (rounded, or exactly).
    A float32 x has one semantics: both are the first. A NaN sum is the GPU's one NaN (_one_nan).
    out_dtype float32 (the rounded sum only, as plan_fused_add_rms_norm): the normalized rows as the
    out-of-place kernel's fp32 out (the RMSNorm row's, rms_row_twin)."""
    x, residual = _as_2d(x), _as_2d(residual)
    if sum_precision not in ("rounded", "fp32"):
        raise ValueError(f"sum_precision must be 'rounded' or 'fp32', got {sum_precision!r}")
    if residual.dtype != x.dtype:
        if sum_precision == "rounded":
            raise ValueError("a residual of another dtype than x's (float32) takes sum_precision='fp32'")
    elif sum_precision == "rounded" or x.dtype == F32:
        total = rounded_sum(x, residual)
        out = rms_row_twin(total, weight, epsilon, block=block, row_phases=residual_phases, gemma=gemma,
                           round_once=round_once, out_dtype=out_dtype)
        return out, total
    if _out(dtypes.get(x.dtype), out_dtype) != dtypes.get(x.dtype):
        raise ValueError("an fp32 out_dtype takes sum_precision='rounded' (the fp32 sum is written over the input)")
    total = fp32_sum(x, residual)
    dt = dtypes.get(x.dtype)
    _, inv = row_stats_twin(total, epsilon, block, input_phases, dt.vec_elems)
    return (scale_twin(total, inv, weight, dt, gemma=gemma, round_once=round_once),
            _one_nan(total.astype(residual.dtype)))

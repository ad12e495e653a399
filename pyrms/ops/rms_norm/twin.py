"""rms_norm's numpy references and bit-exact twin (on the row core's twin, pyrms/ops/_row_twin.py)."""
from __future__ import annotations

from .._row_twin import rms_ref, rms_row_twin

__all__ = ["rms_norm_ref", "rms_norm_twin"]  # what pyrms.reference gathers


def rms_norm_ref(x, weight, epsilon, *, gemma=False):
    """float64 RMSNorm of the rows of x: x / sqrt(mean(x^2) + eps) * w (w = 1 + weight for Gemma; 1
    for weight None)."""
    return rms_ref(x, weight, epsilon, gemma=gemma)


def rms_norm_twin(x, weight, epsilon, *, block, row_phases=0, gemma=False, round_once=False, out_dtype=None):
    """Bit-exact twin of rms_norm.cu.

    x: (rows, hidden) in the storage dtype (numpy float16/float32 or ml_dtypes.bfloat16);
    block: the launch's threads per block; row_phases: each input row's position inside its
    16-byte vector, in elements (an int for all rows, or one per row); out_dtype: float32 for the fp32
    output of bf16/fp16 rows (scale_twin), None for the rows' dtype. Out's alignment changes no arithmetic.
    """
    return rms_row_twin(x, weight, epsilon, block=block, row_phases=row_phases, gemma=gemma, round_once=round_once,
                        out_dtype=out_dtype)

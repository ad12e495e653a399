"""rms_norm_backward's float64 reference; its bit-exact twin is the norm backward's, shared with LayerNorm's
(pyrms/ops/_norm_backward/twin.py)."""
from __future__ import annotations

from .._norm_backward.twin import norm_backward_ref

__all__ = ["rms_norm_backward_ref"]  # what pyrms.reference gathers


def rms_norm_backward_ref(dy, x, weight, epsilon, *, gemma=False, grad_bias=False):
    """float64 (dx, dweight) of RMSNorm: dx = r * (g - x_hat * mean(x_hat * g)), g = w * dy,
    dweight = sum over rows of dy * x_hat (docs/family.md). weight None: g = dy, and (dx,) alone.
    grad_bias: an RMSNorm with a bias, dbias = sum over rows of dy appended."""
    return norm_backward_ref(dy, x, weight, epsilon, gemma=gemma, grad_bias=grad_bias)

"""RMSNorm's backward pass, on the norm backward that LayerNorm's shares (pyrms/ops/_norm_backward/).
Kernels: cuda_src/rms_norm_backward.cu on cuda_src/norm_backward.cuh."""
from .op import rms_norm_backward

__all__ = ["rms_norm_backward"]

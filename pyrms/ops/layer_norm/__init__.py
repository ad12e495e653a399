"""LayerNorm forward and backward. Kernels: cuda_src/layer_norm.cu and cuda_src/layer_norm_backward.cu (on
cuda_src/norm_backward.cuh)."""
from .op import layer_norm, layer_norm_backward

__all__ = ["layer_norm", "layer_norm_backward"]

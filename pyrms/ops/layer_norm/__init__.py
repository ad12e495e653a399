"""LayerNorm forward and backward, and LayerNorm with a quantized output. Kernels: cuda_src/layer_norm.cu and
cuda_src/layer_norm_backward.cu (on cuda_src/norm_backward.cuh)."""
from .op import layer_norm, layer_norm_backward
from .quant import layer_norm_quant

__all__ = ["layer_norm", "layer_norm_backward", "layer_norm_quant"]

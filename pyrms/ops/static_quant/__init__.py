"""A standalone static fp8/int8 quantizer (vLLM's static_scaled_fp8_quant). Kernel: cuda_src/static_quant.cu."""
from .op import static_quant

__all__ = ["static_quant"]

"""RMSNorm with an fp8/int8 output (static, per token, per group), plain and after the fused residual add.
Kernel: cuda_src/rms_norm_quant.cu."""
from .op import fused_add_rms_norm_quant, rms_norm_quant

__all__ = ["rms_norm_quant", "fused_add_rms_norm_quant"]

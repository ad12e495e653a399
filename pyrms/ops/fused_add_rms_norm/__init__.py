"""vLLM's fused residual add and RMSNorm, in place. Kernel: cuda_src/fused_add_rms_norm.cu."""
from .op import fused_add_rms_norm

__all__ = ["fused_add_rms_norm"]

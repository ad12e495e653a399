"""Gated RMSNorm (mamba_ssm's rmsnorm_fn, vLLM's RMSNormGated): the RMSNorm of x gated by silu(z), per group of
columns. Kernel: cuda_src/gated_rms_norm.cu; plan.py plans, twin.py reproduces it bit for bit."""
from .op import gated_rms_norm

__all__ = ["gated_rms_norm"]

"""Gated RMSNorm (mamba_ssm's rmsnorm_fn, vLLM's RMSNormGated): the RMSNorm of x gated by silu(z), per group of
columns, and its backward. Kernels: cuda_src/gated_rms_norm.cu and gated_rms_norm_backward.cu; plan.py plans them,
twin.py reproduces them bit for bit."""
from .backward import gated_rms_norm_backward
from .op import gated_rms_norm

__all__ = ["gated_rms_norm", "gated_rms_norm_backward"]

"""The backward passes: RMSNorm's op, and the launch, plan and twin that LayerNorm's backward shares.
Kernels: cuda_src/rms_norm_backward.cu and cuda_src/norm_backward.cuh."""
from .op import rms_norm_backward
from .prepared import backward_workspace_bytes

__all__ = ["rms_norm_backward", "backward_workspace_bytes"]

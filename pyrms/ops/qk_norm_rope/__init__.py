"""QK-norm and rotary embedding in place on a fused QKV (vLLM's fused_qk_norm_rope). Kernel:
cuda_src/qk_norm_rope.cu; plan.py plans, twin.py reproduces it bit for bit."""
from .op import qk_norm_rope

__all__ = ["qk_norm_rope"]

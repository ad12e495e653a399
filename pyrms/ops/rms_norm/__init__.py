"""RMSNorm forward: rows (op.py) and N-D views, per-row weights and packed short rows (nd.py); plan.py plans, twin.py
reproduces it bit for bit. Kernel: cuda_src/rms_norm.cu."""
from .op import prepared, rms_norm

__all__ = ["rms_norm", "prepared"]

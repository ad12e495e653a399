"""The seed program's kernel, for the demo and as the benchmarks' point of comparison. Kernel:
cuda_src/seed_rms_norm.cu."""
from .op import plan_seed, seed_rms_norm

__all__ = ["seed_rms_norm", "plan_seed"]

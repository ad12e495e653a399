"""A standalone dynamic fp8/int8 quantizer, per tensor, per token or per group (vLLM's scaled_fp8_quant and
scaled_int8_quant without a scale, and per_token_group_quant_fp8). Kernel: cuda_src/dynamic_quant.cu."""
from .op import dynamic_quant

__all__ = ["dynamic_quant"]

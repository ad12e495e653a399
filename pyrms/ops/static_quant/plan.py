"""static_quant's launch plan: pure, no GPU. One block per row; its threads cover the row's output vectors
(Vec<T>::N one-byte elements each: static_quant.cu), at most MAX_BLOCK."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from ...contract import KernelPlan

# static_quant.cu's STATIC_QUANT_MAX_THREADS (its launch bounds).
MAX_BLOCK = 512


@dataclass(frozen=True)
class StaticQuantPlan(KernelPlan):
    """static_quant.cu's kernel for rows of ``dtype`` quantized to ``out_dtype``: ``block`` threads per row."""

    dtype: dtypes.DType
    hidden: int
    out_dtype: dtypes.QuantDType
    block: int

    source = "static_quant.cu"
    kernel = "static_quant_kernel"
    FLAGS: tuple[str, ...] = ()  # no bool template flags

    @property
    def expression(self) -> str:
        """The NVRTC name expression of the kernel this plan launches."""
        return self.contract.expression(T=self.dtype.ctype, Q=self.out_dtype.ctype)

    @property
    def group(self) -> tuple[str, ...]:
        """The unit's name expressions: the one kernel of (dtype, out_dtype), whatever the hidden size."""
        return (self.expression,)


def block_for(dtype: dtypes.DType, hidden: int) -> int:
    """Threads per row: one per output vector of Vec<T>::N elements (rounded up to whole warps), at most
    MAX_BLOCK (longer rows loop)."""
    vectors = -(-hidden // dtype.vec_elems)
    return min(MAX_BLOCK, -(-vectors // 32) * 32)


def plan_static_quant(dtype, hidden: int, out_dtype) -> StaticQuantPlan:
    """The plan of static_quant; ValueError for a dtype or an output dtype it does not take, or a hidden
    size that is not a positive int."""
    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    if isinstance(hidden, bool) or type(hidden) is not int or hidden <= 0:
        raise ValueError(f"hidden must be a positive int, got {hidden!r}")
    return StaticQuantPlan(dt, hidden, qt, block_for(dt, hidden))

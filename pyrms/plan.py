"""Pure launch planning: from (dtype, hidden size, options) to a kernel and a launch shape.

Nothing here touches a GPU, so every decision is testable on the CPU. The plan depends on
the hidden size, dtype and options only, never on the number of rows: that is what makes a
row's result independent of the batch it sits in (GUIDE.md §3).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import dtypes

MAX_BLOCK = 1024
# Up to this many 16-byte input vectors per thread stay in registers between the two passes;
# 8 would spill under the 64-register budget that 1024-thread blocks leave (ptxas -v).
CACHE_CHOICES = (1, 2, 4)


@dataclass(frozen=True)
class RowSplit:
    """How one row of `hidden` elements starting at a byte address splits at 16-byte boundaries."""

    prefix: int  # scalar elements before the first boundary
    vectors: int  # whole 16-byte vectors after them
    tail: int  # scalar elements after the vectors
    vec_elems: int  # elements per vector

    @property
    def tail_start(self) -> int:
        return self.prefix + self.vectors * self.vec_elems


def row_split(address: int, hidden: int, itemsize: int) -> RowSplit:
    """The split the kernels compute for a row at `address` (bytes); mirrors prefix_len in common.cuh."""
    n = 16 // itemsize
    phase = (address // itemsize) % n
    prefix = min((n - phase) % n, hidden)
    vectors = (hidden - prefix) // n
    return RowSplit(prefix, vectors, hidden - prefix - vectors * n, n)


@dataclass(frozen=True)
class RmsNormPlan:
    dtype: dtypes.DType
    hidden: int
    block: int  # threads per block (one block per row)
    cache: int  # 16-byte vectors per thread kept in registers (0: re-read in pass 2)
    gemma: bool
    round_once: bool

    source = "rms_norm.cu"

    @property
    def expression(self) -> str:
        """NVRTC name expression of the kernel variant this plan launches."""
        return kernel_expression(self.dtype, self.cache, self.gemma, self.round_once)


def kernel_expression(dtype: dtypes.DType, cache: int, gemma: bool, round_once: bool) -> str:
    return f"pyrms::rms_norm_kernel<{dtype.ctype}, {cache}, {str(gemma).lower()}, {str(round_once).lower()}>"


def all_expressions(dtype: dtypes.DType) -> list[str]:
    """Every variant of one dtype: compiled together, so the first launch pays for all of them once."""
    return [kernel_expression(dtype, c, g, r) for c in (0, *CACHE_CHOICES) for g in (False, True) for r in (False, True)]


def block_and_cache(dtype: dtypes.DType, hidden: int) -> tuple[int, int]:
    """Threads per block and register-cached vectors per thread for a row of `hidden` elements.

    The fewest vectors per thread that fit in one block of at most 1024 threads, so that each
    thread has one or a few 16-byte loads in flight; past 4 per thread, re-read in pass 2.
    """
    vectors = -(-hidden // dtype.vec_elems)
    for cache in CACHE_CHOICES:
        if vectors <= MAX_BLOCK * cache:
            threads = -(-vectors // cache)
            return max(32, -(-threads // 32) * 32), cache
    return MAX_BLOCK, 0


def plan_rms_norm(dtype, hidden: int, *, gemma: bool = False, round_once: bool = False) -> RmsNormPlan:
    dt = dtypes.get(dtype)
    block, cache = block_and_cache(dt, hidden)
    return RmsNormPlan(dt, hidden, block, cache, bool(gemma), bool(round_once))

"""Pure launch planning: from (dtype, hidden size, options) to a kernel and a launch shape.

Nothing here touches a GPU, so every decision is testable on the CPU. The plan depends on
the hidden size, dtype and options only, never on the number of rows: that is what makes a
row's result independent of the batch it sits in (GUIDE.md §3).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import dtypes

MAX_BLOCK = 1024
# How many 16-byte input vectors per thread a kernel variant keeps in registers between the
# two passes (0: none, re-read in pass 2).
CACHE_CHOICES = (1, 2, 4)


def max_threads(cache: int) -> int:
    """Threads per block a CACHE variant allows (max_threads in rms_norm.cu): the registers for
    `cache` vectors must fit beside the rest without spilling."""
    return MAX_BLOCK if cache <= 2 else 2 * MAX_BLOCK // cache


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

    @property
    def group(self) -> tuple[str, ...]:
        """The expressions compiled together with this one."""
        return variant_group(self.dtype, self.gemma, self.round_once)


def kernel_expression(dtype: dtypes.DType, cache: int, gemma: bool, round_once: bool) -> str:
    return f"pyrms::rms_norm_kernel<{dtype.ctype}, {cache}, {str(gemma).lower()}, {str(round_once).lower()}>"


def variant_group(dtype: dtypes.DType, gemma: bool, round_once: bool) -> tuple[str, ...]:
    """Every CACHE variant of one (dtype, options): compiled together in one NVRTC run and cache
    entry, so a process pays one compile per option set whatever hidden sizes it meets."""
    return tuple(kernel_expression(dtype, c, gemma, round_once) for c in (0, *CACHE_CHOICES))


def block_and_cache(dtype: dtypes.DType, hidden: int) -> tuple[int, int]:
    """Threads per block and register-cached vectors per thread for a row of `hidden` elements.

    Measured on the H200 (bench/results/2026-11-30/tune5.log, tools/tune_rms_norm.py): four
    16-byte vectors per thread, held in registers, was the best or within 0.02 of the best at
    every hidden size from 1024 to 16384 (bf16), e.g. 0.93 of the copy ceiling at 16384x5120
    with 160 threads, against 0.85 with one vector per thread. Rows too short to give 32 threads
    four vectors each use one warp and fewer vectors; rows too long to cache in 512 threads
    re-read their input in pass 2 with 1024 threads (the best uncached shape at hidden 65536).
    """
    vectors = -(-hidden // dtype.vec_elems)
    for cache in CACHE_CHOICES:  # short rows: one warp, as few vectors per thread as cover the row
        if vectors <= 32 * cache:
            return 32, cache
    cache = CACHE_CHOICES[-1]
    threads = -(-vectors // cache)
    if threads <= max_threads(cache):
        return -(-threads // 32) * 32, cache
    return MAX_BLOCK, 0


def plan_rms_norm(dtype, hidden: int, *, gemma: bool = False, round_once: bool = False) -> RmsNormPlan:
    dt = dtypes.get(dtype)
    block, cache = block_and_cache(dt, hidden)
    return RmsNormPlan(dt, hidden, block, cache, bool(gemma), bool(round_once))

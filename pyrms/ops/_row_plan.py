"""The row plan every op on the row core shares: from (dtype, hidden size, options) to a kernel and a
launch shape (each op's own plan, in its folder's plan.py, builds on it).

Nothing here touches a GPU, so every decision is testable on the CPU. The plan depends on
the hidden size, dtype and options only, never on the number of rows: that is what makes a
row's result independent of the batch it sits in (docs/numerics.md, "The forward contract").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import dtypes
from ..contract import KernelPlan

MAX_BLOCK = 1024
# Up to this many rows, launches use the latency shape (row_core.cuh's SPREAD > 1, with the weights
# loaded early): one resident wave or less, where the time is a chain of memory latencies, not bandwidth.
FEW_ROWS = 256
# How many 16-byte input vectors per thread a kernel variant keeps in registers between the
# two passes (0: none, re-read in pass 2).
CACHE_CHOICES = (1, 2, 4)
# (CACHE, SPREAD) of the few-row kernels compiled: for each CACHE, the spreads spread_for can pick.
FEW_ROW_SHAPES = ((0, 1), (1, 1), (2, 2), (4, 2), (4, 4))
# Packed rows (row_core.cuh's RowShape LANES): rows whose fold is one warp (block_and_cache's short rows)
# run LANES lanes each, PACKED_THREADS threads per block, in rms_norm_nd_kernel. (LANES, CACHE) compiled,
# CACHE the vectors each lane holds: POS = min(CACHE, 32 / LANES) fold positions of CACHE / POS steps each
# (packed_positions). (8, 2): a row of up to 16 vectors (QK-norm's 128 bf16 elements) in 8 lanes of two
# positions, four rows per warp, where 16 lanes of one position did two: the rows' work that is not per
# element is shared by fewer lanes (q of 16384 tokens on the H200: 137 us against 148 for (16, 1);
# docs/perf_notes.md).
PACKED_SHAPES = ((8, 1), (8, 2), (32, 1), (32, 2), (32, 4))
PACKED_THREADS = 256


def packed_positions(lanes: int, cache: int) -> int:
    """Fold positions per lane of the packed shape (lanes, cache): row_core.cuh's RowShape::POS."""
    return min(cache, 32 // lanes)


def packed_shape(dtype: dtypes.DType, hidden: int, block: int, cache: int) -> tuple[int, int]:
    """(LANES, CACHE) of the packed rows (PACKED_SHAPES) of a row plan of ``block`` threads caching ``cache`` fold
    steps, or (0, 0) where rows are too long to pack (a fold wider than a warp). Each position holds the plan's
    cache of fold steps; the positions of fewer than 32 lanes' worth only where every alignment of the row leaves at
    most that many body vectors (row_core.cuh: the positions past them must hold no element); prefix and tail fit
    any. The packed kernels (the N-D RMSNorm's rows, the rotary QK-norm's heads) take it: the same tree per row."""
    if block != 32:
        return 0, 0
    body = hidden // dtype.vec_elems  # the most body vectors any alignment gives
    return next((n, c) for n, c in PACKED_SHAPES
                if c // packed_positions(n, c) == cache and (body <= n * packed_positions(n, c) or n == 32))


def max_threads(held: int) -> int:
    """Threads per block a kernel that holds `held` vectors per thread allows (max_threads in
    row_core.cuh): the registers for them must fit beside the rest without spilling."""
    return MAX_BLOCK if held <= 2 else 2 * MAX_BLOCK // held


def spread_for(cache: int, block: int) -> int:
    """Threads per fold thread of the few-row shape (row_core.cuh's SPREAD): as many as divide the
    cache and fit in a block, so that each thread holds one vector (or two) instead of `cache`."""
    for spread in (4, 2):
        if cache % spread == 0 and cache >= spread and spread * block <= MAX_BLOCK:
            return spread
    return 1


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


def _bool(value: bool) -> str:
    return str(bool(value)).lower()


# The weight of an RMSNorm row (the kernels' W): the rows' own dtype, float32 beside bf16 or fp16 rows,
# or none (every weight 1).
WEIGHT_KINDS = ("same", "float32", "none")


def _same_or_float32(dtype: dtypes.DType, other, what: str) -> str:
    """"same" where `other` is `dtype`, "float32" where it is float32; ValueError naming `what` otherwise."""
    odt = dtypes.get(other)
    if odt is dtype:
        return "same"
    if odt is dtypes.FLOAT32:
        return "float32"
    raise ValueError(f"{what} must be {dtype.name} (the input's) or float32, got {odt.name}")


def weight_kind(dtype: dtypes.DType, weight_dtype) -> str:
    """The kind of a weight of `weight_dtype` (a dtype, or "none") beside rows of `dtype`; ValueError
    for any other dtype."""
    if isinstance(weight_dtype, str) and weight_dtype == "none":
        return "none"
    return _same_or_float32(dtype, weight_dtype, "weight dtype")


# The output of a row op (the kernels' O): the rows' own dtype, or float32 beside bf16 or fp16 rows (an fp32
# output for bf16 input, Hugging Face's promotion of an fp32 weight times bf16 activations).
OUT_KINDS = ("same", "float32")


def out_kind(dtype: dtypes.DType, out_dtype) -> str:
    """The kind of an output of `out_dtype` (None: the rows' dtype) beside rows of `dtype`; ValueError for
    any other dtype."""
    return "same" if out_dtype is None else _same_or_float32(dtype, out_dtype, "out_dtype")


def _type_params(dtype: dtypes.DType, weight: str, out: str) -> dict:
    """The kernels' type parameters W (the weight's type: the rows', float or void) and O (the output's)."""
    return {"W": {"same": dtype.ctype, "float32": "float", "none": "void"}[weight],
            "O": "float" if out == "float32" else dtype.ctype}


@dataclass(frozen=True)
class _RowPlan(KernelPlan):
    """A kernel on the row core (row_core.cuh): `block` is the fold width F, which with the dtype, the
    hidden size and the row's alignment defines the reduction tree; many rows launch blocks of F
    threads (SPREAD = 1), few rows blocks of spread * F threads (the latency shape). Same bits."""

    dtype: dtypes.DType
    hidden: int
    block: int  # the fold width: threads per block for many rows
    cache: int  # 16-byte vectors per fold thread kept in registers (0: re-read in pass 2)

    kernel = ""  # the kernel template's name (its source file below)
    source = ""
    # The plan's fields that are the kernel's bool option flags, in template order (_flags). Each is a unit of
    # its own when on, so pyrms.precompile enumerates and labels the units, and tools/ptx_dump names the
    # variants, from this list: a flag added to a kernel and its plan needs nothing more there.
    FLAGS: ClassVar[tuple[str, ...]] = ()

    def _flags(self) -> tuple:
        """The kernel's option flags, in template order after CACHE and SPREAD (then EARLY_WEIGHTS, ALIGNED)."""
        return tuple(getattr(self, name) for name in self.FLAGS)

    def _type_params(self) -> dict:
        """The kernel's template parameters beyond the row core's (type parameters, a mode): by name."""
        return {}

    @property
    def align_mask(self) -> int:
        """The bits the pointers of a call must have clear for the ALIGNED kernels: 16 bytes, or 32 where the
        output is fp32 beside 2-byte rows (its vector of the rows' N elements is 32 bytes: write_row)."""
        return 15

    def _expression(self, cache: int, spread: int, early: bool, flags: tuple | None = None, aligned: bool = False) -> str:
        flags = self._flags() if flags is None else flags
        return self.contract.expression(T=self.dtype.ctype, CACHE=cache, SPREAD=spread, EARLY_WEIGHTS=early,
                                        ALIGNED=aligned, **dict(zip(map(str.upper, self.FLAGS), flags)),
                                        **self._type_params())

    @property
    def spread(self) -> int:
        return spread_for(self.cache, self.block)

    @property
    def latency_block(self) -> int:
        """Threads per block of the few-row kernel."""
        return self.spread * self.block

    @property
    def expression(self) -> str:
        """NVRTC name expression of the kernel variant this plan launches for many rows."""
        return self._expression(self.cache, 1, False)

    @property
    def latency_expression(self) -> str:
        """The variant for few rows (plan.FEW_ROWS): spread * block threads, the weights loaded early."""
        return self._expression(self.cache, self.spread, True)

    @property
    def aligned_latency_expression(self) -> str:
        """The few-row variant for rows that are all body (row_core.cuh's ALIGNED): every pointer 16-byte
        aligned and the hidden size and row strides multiples of the vector. Same bits, less code."""
        return self._expression(self.cache, self.spread, True, aligned=True)

    def aligned_layout(self, *strides: int) -> bool:
        """Whether rows of these strides (elements) can take the ALIGNED kernel, given aligned pointers."""
        return all(n % self.dtype.vec_elems == 0 for n in (self.hidden, *strides))

    def _group(self, flags: tuple) -> tuple[str, ...]:
        many = [self._expression(c, 1, False, flags) for c in (0, *CACHE_CHOICES)]
        few = [self._expression(c, s, True, flags, aligned) for c, s in FEW_ROW_SHAPES for aligned in (False, True)]
        return tuple(many + few)

    @property
    def group(self) -> tuple[str, ...]:
        """Every CACHE and shape variant of one (dtype, options): compiled together in one NVRTC run
        and cache entry, so a process pays one compile per option set whatever hidden sizes it meets."""
        return self._group(self._flags())


class _WeightAndOutKinds:
    """The kernel type arguments, alignment and output dtype of a row plan with a weight kind and an output kind
    (its `weight`, WEIGHT_KINDS, and `out`, OUT_KINDS): the plain, residual-add and LayerNorm row plans."""

    def _type_params(self) -> dict:
        return _type_params(self.dtype, self.weight, self.out)

    @property
    def align_mask(self) -> int:
        return 31 if self.out == "float32" else 15

    @property
    def out_dtype(self) -> dtypes.DType:
        """The output's dtype."""
        return dtypes.FLOAT32 if self.out == "float32" else self.dtype


def block_and_cache(dtype: dtypes.DType, hidden: int) -> tuple[int, int]:
    """Threads per block and register-cached vectors per thread for a row of `hidden` elements.

    Measured on the H200 (the RMSNorm row's launch-shape sweep; docs/perf_notes.md, "Versions"): four
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




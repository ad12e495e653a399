"""Pure launch planning: from (dtype, hidden size, options) to a kernel and a launch shape.

Nothing here touches a GPU, so every decision is testable on the CPU. The plan depends on
the hidden size, dtype and options only, never on the number of rows: that is what makes a
row's result independent of the batch it sits in (docs/numerics.md, "The forward contract").
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar

from . import dtypes

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


def _type_args(dtype: dtypes.DType, weight: str, out: str) -> str:
    """The kernels' trailing type arguments: W (the weight's type: ", float", ", void"), then O (the output's,
    ", float"), each left out where it is the rows' own type and nothing follows it."""
    w = {"same": "", "float32": ", float", "none": ", void"}[weight]
    return w if out == "same" else f"{w or ', ' + dtype.ctype}, float"


@dataclass(frozen=True)
class _RowPlan:
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

    def _weight_type(self) -> str:
        """The kernel's trailing type arguments (_type_args), "" for the default."""
        return ""

    @property
    def align_mask(self) -> int:
        """The bits the pointers of a call must have clear for the ALIGNED kernels: 16 bytes, or 32 where the
        output is fp32 beside 2-byte rows (its vector of the rows' N elements is 32 bytes: write_row)."""
        return 15

    def _expression(self, cache: int, spread: int, early: bool, flags: tuple | None = None, aligned: bool = False) -> str:
        options = ", ".join(_bool(f) for f in (*(self._flags() if flags is None else flags), early, aligned))
        return f"pyrms::{self.kernel}<{self.dtype.ctype}, {cache}, {spread}, {options}{self._weight_type()}>"

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
    (its `weight`, WEIGHT_KINDS, and `out`, OUT_KINDS): rms_norm's, fused add's and LayerNorm's."""

    def _weight_type(self) -> str:
        return _type_args(self.dtype, self.weight, self.out)

    @property
    def align_mask(self) -> int:
        return 31 if self.out == "float32" else 15

    @property
    def out_dtype(self) -> dtypes.DType:
        """The output's dtype."""
        return dtypes.FLOAT32 if self.out == "float32" else self.dtype


@dataclass(frozen=True)
class RmsNormPlan(_WeightAndOutKinds, _RowPlan):
    gemma: bool = False
    round_once: bool = False
    weight: str = "same"  # WEIGHT_KINDS
    out: str = "same"  # OUT_KINDS

    kernel = "rms_norm_kernel"
    source = "rms_norm.cu"

    FLAGS = ("gemma", "round_once")


    @property
    def packed_shape(self) -> tuple[int, int]:
        """(LANES, CACHE) of the packed kernel (PACKED_SHAPES), or (0, 0) where rows are too long to pack (a
        fold wider than a warp). Each position holds the plan's cache of fold steps; the positions of fewer
        than 32 lanes' worth only where every alignment of the row leaves at most that many body vectors
        (row_core.cuh: the positions past them must hold no element); prefix and tail fit any."""
        if self.block != 32:
            return 0, 0
        body = self.hidden // self.dtype.vec_elems  # the most body vectors any alignment gives
        return next((n, c) for n, c in PACKED_SHAPES
                    if c // packed_positions(n, c) == self.cache and (body <= n * packed_positions(n, c) or n == 32))

    @property
    def lanes(self) -> int:
        """Lanes per row of the packed shape (8 or 32), or 0 where rows are too long to pack."""
        return self.packed_shape[0]

    @property
    def nd_block(self) -> int:
        """Threads per block of rms_norm_nd_kernel: PACKED_THREADS for packed rows, else the fold."""
        return PACKED_THREADS if self.lanes else self.block

    @property
    def nd_rows_per_block(self) -> int:
        return PACKED_THREADS // self.lanes if self.lanes else 1

    def _nd(self, lanes: int, cache: int, aligned: bool = False) -> str:
        flags = ", ".join(_bool(f) for f in (aligned, *self._flags()))
        return f"pyrms::rms_norm_nd_kernel<{self.dtype.ctype}, {cache}, {lanes}, {flags}{self._weight_type()}>"

    @property
    def nd_expression(self) -> str:
        """The N-D kernel (rms_norm.cu's rms_norm_nd_kernel) for this hidden size: packed rows or one per block."""
        return self._nd(*self.packed_shape) if self.lanes else self._nd(0, self.cache)

    @property
    def nd_aligned_expression(self) -> str | None:
        """The packed kernel for rows that are all body (ALIGNED, as aligned_latency_expression); None
        for rows too long to pack."""
        return self._nd(*self.packed_shape, True) if self.lanes else None

    @property
    def nd_group(self) -> tuple[str, ...]:
        """Every rms_norm_nd_kernel variant of one (dtype, options): a unit of its own (the N-D views,
        the per-row weight, and many short rows of any layout), apart from the plain rows' group."""
        return tuple([self._nd(0, c) for c in (0, *CACHE_CHOICES)]
                     + [self._nd(n, c, a) for n, c in PACKED_SHAPES for a in (False, True)])

    @property
    def weight_dtype(self) -> dtypes.DType | None:
        """The weight's dtype (None: no weight)."""
        return {"same": self.dtype, "float32": dtypes.FLOAT32, "none": None}[self.weight]

    @property
    def weight_itemsize(self) -> int:
        """Bytes per weight element (0: no weight)."""
        return self.weight_dtype.itemsize if self.weight_dtype else 0


def kernel_expression(dtype: dtypes.DType, cache: int, spread: int, gemma: bool, round_once: bool,
                      early_weights: bool = False, aligned: bool = False) -> str:
    """The name expression of one rms_norm.cu variant (for tools that time variants one by one)."""
    return RmsNormPlan(dtype, 0, 0, cache, gemma, round_once)._expression(cache, spread, early_weights, aligned=aligned)


def variant_group(dtype: dtypes.DType, gemma: bool, round_once: bool) -> tuple[str, ...]:
    """Every variant of rms_norm.cu for one (dtype, options): one NVRTC run."""
    return RmsNormPlan(dtype, 0, 0, 0, gemma, round_once).group


def block_and_cache(dtype: dtypes.DType, hidden: int) -> tuple[int, int]:
    """Threads per block and register-cached vectors per thread for a row of `hidden` elements.

    Measured on the H200 (tools/tune_rms_norm.py; docs/perf_notes.md, "Versions"): four
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


def _rms_weight(dt: dtypes.DType, weight_dtype, gemma: bool) -> str:
    kind = "same" if weight_dtype is None else weight_kind(dt, weight_dtype)
    if kind == "none" and gemma:
        raise ValueError("gemma needs a weight (it multiplies by 1 + weight); got weight=None")
    return kind


def plan_rms_norm(dtype, hidden: int, *, gemma: bool = False, round_once: bool = False,
                  weight_dtype=None, out_dtype=None) -> RmsNormPlan:
    """weight_dtype: None or the dtype (the default), float32, or "none" (no weight); out_dtype: None or
    the dtype (the default), or float32 beside bf16/fp16 rows."""
    dt = dtypes.get(dtype)
    block, cache = block_and_cache(dt, hidden)
    return RmsNormPlan(dt, hidden, block, cache, bool(gemma), bool(round_once), _rms_weight(dt, weight_dtype, gemma),
                       out_kind(dt, out_dtype))


# --- The rest of the family: fused add, LayerNorm, the backward passes ----------------------------


# What fused_add_rms_norm normalizes (docs/numerics.md, "Fused residual add"): the sum rounded to the
# dtype (vLLM's, the default; the sum is stored rounded), or the fp32 sum (FlashInfer's, SGLang's; the
# residual still stores it rounded, or exactly in an fp32 residual: QuACK's, Transformer Engine's).
SUM_PRECISIONS = ("rounded", "fp32")


@dataclass(frozen=True)
class FusedAddRmsNormPlan(RmsNormPlan):
    """For fused_add_rms_norm.cu: rms_norm.cu's row (rms_norm_row.cuh) with the residual add as its
    source, so rms_norm's launch shapes and variants. sum_precision "fp32" (bf16 and fp16 only) is the
    fp32-sum kernel, with the residual of the dtype or, fp32_residual, of float32. An fp32 output
    (out="float32", with the rounded sum only) is written to an out of its own
    (fused_add_rms_norm_out_kernel), not over the input."""

    sum_precision: str = "rounded"
    fp32_residual: bool = False

    source = "fused_add_rms_norm.cu"

    @property
    def kernel(self) -> str:  # type: ignore[override]
        if self.sum_precision == "fp32":
            return "fused_add_rms_norm_fp32_sum_kernel"
        return "fused_add_rms_norm_out_kernel" if self.out == "float32" else "fused_add_rms_norm_kernel"

    def _weight_type(self) -> str:
        if self.sum_precision == "rounded":
            return super()._weight_type()
        weight = {"same": self.dtype.ctype, "float32": "float", "none": "void"}[self.weight]
        return f", {weight}, {self.residual_dtype.ctype}"  # the fp32-sum kernel spells out W and R

    @property
    def residual_dtype(self) -> dtypes.DType:
        return dtypes.FLOAT32 if self.fp32_residual else self.dtype


def plan_fused_add_rms_norm(dtype, hidden: int, *, gemma: bool = False, round_once: bool = False,
                            weight_dtype=None, sum_precision: str | None = None,
                            residual_dtype=None, out_dtype=None) -> FusedAddRmsNormPlan:
    """sum_precision: one of SUM_PRECISIONS, or None: "fp32" with a float32 residual beside bf16 or fp16
    rows (whose sum is stored exactly, so nothing else is meaningful), else "rounded". residual_dtype:
    None or the dtype, or float32. A float32 dtype has one semantics (its sum is never rounded): both
    precisions plan the same kernel. out_dtype: as plan_rms_norm's; a float32 output beside bf16/fp16
    rows is offered with the rounded sum only (the fp32-sum kernel writes the input in place: refused by
    name). ValueError for anything else."""
    dt = dtypes.get(dtype)
    rdt = dt if residual_dtype is None else dtypes.get(residual_dtype)
    if rdt not in (dt, dtypes.FLOAT32):
        raise ValueError(f"residual dtype must be {dt.name} (the input's) or float32, got {rdt.name}")
    fp32_residual = rdt is not dt
    if sum_precision is None:
        sum_precision = "fp32" if fp32_residual else "rounded"
    if not isinstance(sum_precision, str) or sum_precision not in SUM_PRECISIONS:
        raise ValueError(f"sum_precision must be one of {SUM_PRECISIONS} (or None), got {sum_precision!r}")
    if fp32_residual and sum_precision == "rounded":
        raise ValueError(f"a float32 residual beside {dt.name} rows stores the fp32 sum exactly, which is then what "
                         "is normalized: sum_precision must be 'fp32' (or None), got 'rounded'")
    if dt is dtypes.FLOAT32:
        sum_precision = "rounded"  # the fp32 sum is the rounded one
    out = out_kind(dt, out_dtype)
    if out == "float32" and sum_precision == "fp32":
        raise ValueError(f"out_dtype=float32 beside {dt.name} rows is offered with sum_precision='rounded' only "
                         "(fused_add_rms_norm_out_kernel); sum_precision='fp32' (or a float32 residual) writes the "
                         "normalized row over the input, of the input's dtype")
    block, cache = block_and_cache(dt, hidden)
    return FusedAddRmsNormPlan(dt, hidden, block, cache, bool(gemma), bool(round_once),
                               _rms_weight(dt, weight_dtype, gemma), out, sum_precision, fp32_residual)


# The backward kernels launch at most 512 threads of their own (rms_norm_backward's V = 2 variant needs
# 128 registers), re-reading their rows (V = 0); the register-cached V = 1, 2 variants are compiled
# too, as candidates for tools/tune_backward.py, which measured them slower (below). Their statistics
# use the forward's fold width (NormBackwardPlan.stats_fold) whatever their block, so they are the forward's
# by construction (row_core.cuh).
BACKWARD_MAX_BLOCK = 512
BACKWARD_VECTORS = (1, 2)
# Backward rows re-read per pass (V = 0), about this many 16-byte vectors per thread: measured on
# the H200 at 16384x5120 bf16 (tools/tune_backward.py; docs/perf_notes.md and docs/family.md),
# 128 threads x 5 vectors took 222 us, against 480 us for the register-cached 320 x 2 (111
# registers: one block per multiprocessor) and 252 us for 256 x 2.5 or 306 us for 64 x 10; again on
# 2026-12-01 (the same tool): 128 threads 205 us, the
# forward's 160 threads 272 us (six blocks of 160 fit a multiprocessor: 1024 blocks of 16 rows make
# 1.3 waves, where eight of 128 make one).
BACKWARD_VECTORS_PER_THREAD = 5
# Up to this many rows the backward runs one block per row (rows_per_block = 1), its terms summed into
# the chunks' partials by the second kernel: a chunk of 16 rows per block leaves most multiprocessors
# idle below some thousands of rows. H200, 5120 bf16 (docs/perf_notes.md, "The backward"):
# 32 rows 124 -> 12.6 us, 1024 rows 140 -> 34 us, 2048 rows 151 -> 66 us, 4096 rows 164 -> 119 us; at
# 16384 rows one per block is slower (403 us against 235: the workspace then holds every row's terms).
BACKWARD_FEW_ROWS = 4096


def backward_block(dtype: dtypes.DType, hidden: int) -> int:
    """Threads per block of the backward kernels (which then loop over their row, V = 0)."""
    vectors = -(-hidden // dtype.vec_elems)
    threads = -(-vectors // BACKWARD_VECTORS_PER_THREAD)
    return min(BACKWARD_MAX_BLOCK, max(32, -(-threads // 32) * 32))


# dweight/dbias are summed over chunks of this many rows, then over chunks (norm_backward.cuh).
# A constant, so the summation order depends on row indices only, never on the launch shape.
GRAD_CHUNK_ROWS = 16
# A chunk's column sums live in shared memory when they fit in this many bytes, else in the workspace.
SHARED_SUMS_LIMIT = 96 * 1024


@dataclass(frozen=True)
class LayerNormPlan(_WeightAndOutKinds, _RowPlan):
    bias: bool = True  # False: y = x_hat * w, no bias term
    weightless: bool = False  # True: no weight (w = 1), the kernels' W = void
    fp32_params: bool = False  # True: weight and bias in fp32 beside bf16/fp16 rows (W = float)
    out: str = "same"  # OUT_KINDS

    kernel = "layer_norm_kernel"
    source = "layer_norm.cu"

    FLAGS = ("bias",)

    @property
    def weight(self) -> str:
        """The weight's kind (WEIGHT_KINDS); the bias, if any, is of the same dtype (of the rows' without a weight)."""
        return "none" if self.weightless else "float32" if self.fp32_params else "same"

    @property
    def param_dtype(self) -> dtypes.DType:
        """The weight's and the bias's dtype."""
        return dtypes.FLOAT32 if self.fp32_params else self.dtype

    @property
    def group(self) -> tuple[str, ...]:
        """Every kernel of layer_norm.cu for one dtype and weight (the dtype's, or none: its own unit),
        forward (with and without bias) and backward (without a weight, summing grad_bias or nothing); a
        mixed unit (fp32 parameters or output beside bf16/fp16 rows) is the forward's only: the backward
        takes parameters of the rows' dtype."""
        forward = self._group((True,)) + self._group((False,))
        if self.fp32_params or self.out != "same":
            return forward
        return forward + _backward_group(self.dtype, True, self.weightless)


def plan_layer_norm(dtype, hidden: int, *, bias: bool = True, weight: bool = True, weight_dtype=None,
                    out_dtype=None) -> LayerNormPlan:
    """weight=False: no weight (torch.nn.LayerNorm(elementwise_affine=False) when bias is False too);
    weight_dtype: the weight's and the bias's dtype (None: the rows'; float32 beside bf16/fp16 rows);
    out_dtype: as plan_rms_norm's."""
    dt = dtypes.get(dtype)
    fp32 = weight and weight_dtype is not None and weight_kind(dt, weight_dtype) == "float32"
    return LayerNormPlan(dt, hidden, *block_and_cache(dt, hidden), bool(bias), not weight, fp32,
                         out_kind(dt, out_dtype))


def _sum_partials(dtype: dtypes.DType) -> dict[str, None]:
    return dict.fromkeys(f"pyrms::sum_partials_kernel<{d.ctype}>" for d in (dtype, dtypes.FLOAT32))


def _backward_group(dtype: dtypes.DType, centered: bool, weightless: bool) -> tuple[str, ...]:
    """The backward kernels of one dtype and weight kind: every V, gemma (RMSNorm with a weight) and
    dbias (LayerNorm without a weight) variant, and the sums over rows where any variant has them."""
    variants = [NormBackwardPlan(dtype, 0, 32, v, centered, g, dtype, weightless=weightless, grad_bias=b)
                for v in (0, *BACKWARD_VECTORS)
                for g in ((False,) if centered or weightless else (False, True))
                for b in ((True, False) if centered and weightless else (True,))]
    sums = _sum_partials(dtype) if any(p.params for p in variants) else {}
    return tuple(p.expression for p in variants) + tuple(sums)


@dataclass(frozen=True)
class NormBackwardPlan:
    """The backward of RMSNorm (centered=False) or LayerNorm (centered=True): cuda_src/norm_backward.cuh.

    weightless: no weight (every weight 1, the kernels' W = void): dx only, no dweight; its columns
    split as a 16-byte aligned weight's, so dx is bitwise a weighted backward's with such a weight of
    ones. grad_bias: whether a LayerNorm without weight sums grad_bias (with a weight the kernel always
    does: one variant, the launch sums the plane only when asked). Nothing summed (RMSNorm without a
    weight, LayerNorm without weight and grad_bias): no workspace and no second kernel."""

    dtype: dtypes.DType
    hidden: int
    block: int
    vectors: int  # 16-byte vectors of x and dy per thread kept in registers (0: re-read)
    centered: bool
    gemma: bool
    grad_dtype: dtypes.DType  # of dweight (and dbias): dtype or float32
    chunk_rows: int = GRAD_CHUNK_ROWS
    weightless: bool = False
    grad_bias: bool = True  # LayerNorm without a weight only (see above)

    def __post_init__(self):
        if self.vectors and self.stats_fold > self.block:  # row_core.cuh: only re-reading rows fold wider
            raise ValueError(f"a backward that keeps {self.vectors} vectors per thread needs at least the fold's "
                             f"{self.stats_fold} threads, got {self.block}")
        if self.weightless and self.gemma:
            raise ValueError("gemma needs a weight (it multiplies by 1 + weight); got weight=None")

    # cached_property (a frozen dataclass keeps its __dict__): the backward's prepared call reads these
    # about fifteen times per launch, each a Python call otherwise.
    @cached_property
    def stats_fold(self) -> int:
        """The fold width of the recomputed statistics (the kernel's `fold` argument): the forward's
        block for this dtype and hidden size, so that they are the forward's statistics."""
        return block_and_cache(self.dtype, self.hidden)[0]

    @property
    def source(self) -> str:
        return "layer_norm.cu" if self.centered else "rms_norm_backward.cu"

    @property
    def expression(self) -> str:
        if self.centered:
            without = f", void, {_bool(self.sums_bias)}" if self.weightless else ""
            return f"pyrms::layer_norm_backward_kernel<{self.dtype.ctype}, {self.vectors}{without}>"
        without = ", void" if self.weightless else ""
        return f"pyrms::rms_norm_backward_kernel<{self.dtype.ctype}, {self.vectors}, {_bool(self.gemma)}{without}>"

    @property
    def sum_expression(self) -> str:
        return f"pyrms::sum_partials_kernel<{self.grad_dtype.ctype}>"

    @property
    def group(self) -> tuple[str, ...]:
        """The compile unit: LayerNorm's is layer_norm.cu's for the dtype and weight kind (forward and
        backward); RMSNorm's every backward variant of the dtype and weight kind."""
        if self.centered:
            return LayerNormPlan(self.dtype, 0, 0, 0, weightless=self.weightless).group
        return _backward_group(self.dtype, False, self.weightless)

    @cached_property
    def sums_bias(self) -> bool:
        """Whether kernel 1 sums dbias: LayerNorm's always beside dweight, without a weight for grad_bias."""
        return self.centered and (self.grad_bias or not self.weightless)

    @cached_property
    def params(self) -> int:
        """Parameter gradients kernel 1 sums over rows (the workspace's planes, in order): dweight unless
        weightless, then dbias where sums_bias."""
        return int(not self.weightless) + int(self.sums_bias)

    @cached_property
    def ws_stride(self) -> int:
        """Floats per chunk row of the workspace: a multiple of 4 (16 bytes) >= hidden + 7, room for
        the weight's phase in front (norm_backward.cuh)."""
        return -(-(self.hidden + 7) // 4) * 4

    @cached_property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of kernel 1: the chunk's column sums, or 0 to keep them in the workspace."""
        nbytes = self.params * self.ws_stride * 4
        return nbytes if nbytes <= SHARED_SUMS_LIMIT else 0

    def chunks(self, rows: int) -> int:
        return -(-rows // self.chunk_rows)

    def rows_per_block(self, rows: int) -> int:
        """The planned rows per block of kernel 1: one for few rows, else a chunk."""
        return 1 if rows <= BACKWARD_FEW_ROWS else self.chunk_rows

    def workspace_rows(self, rows: int, rows_per_block: int | None = None) -> int:
        """Rows of each workspace plane: one per chunk, or one per input row with one row per block
        (rows_per_block None: the planned one)."""
        if rows_per_block is None:
            rows_per_block = self.rows_per_block(rows)
        return rows if rows_per_block == 1 else self.chunks(rows)

    def workspace_bytes(self, rows: int, rows_per_block: int | None = None) -> int:
        return self.params * self.workspace_rows(rows, rows_per_block) * self.ws_stride * 4


def plan_norm_backward(dtype, hidden: int, *, layer_norm: bool = False, gemma: bool = False,
                       grad_dtype=None, weight: bool = True, grad_bias: bool = True) -> NormBackwardPlan:
    """weight=False: no weight (weight=None); grad_bias=False: LayerNorm without a weight sums no
    grad_bias either (NormBackwardPlan says what each sums)."""
    dt = dtypes.get(dtype)
    gdt = dt if grad_dtype is None else dtypes.get(grad_dtype)
    if gdt not in (dt, dtypes.FLOAT32):
        raise ValueError(f"grad_dtype must be {dt.name} or float32, got {gdt.name}")
    if layer_norm and gemma:
        raise ValueError("gemma applies to RMSNorm only")
    block, vectors = backward_block(dt, hidden), 0
    return NormBackwardPlan(dt, hidden, block, vectors, bool(layer_norm), bool(gemma), gdt, weightless=not weight,
                            grad_bias=bool(grad_bias))


# --- Quantized outputs (rms_norm_quant.cu) ---------------------------------------------------------

# The kernels' MODE, by position: one given scale, one computed per row (per token), or one per group of
# `group` consecutive elements of a row (rms_norm_quant.cu's group kernels).
QUANT_MODES = ("static", "per_token", "per_group")
# Per group: the group sizes (vLLM's and DeepSeek's 1x64 and 1x128), and the most groups a row may have
# (rms_norm_quant.cu's GroupScales::MAX: their maxima are kept in static shared memory).
QUANT_GROUPS = (64, 128)
MAX_GROUPS = 1024


@dataclass(frozen=True)
class RmsNormQuantPlan(_RowPlan):
    """For rms_norm_quant.cu: rms_norm's row (its fold width, cache and launch shapes) with a quantizing
    output step; the weight is of the rows' dtype. round_input: quantize rms_norm's output rounded to
    the rows' dtype (vLLM's kernels) instead of the fp32 value. norm_out: also store the unquantized value
    rounded to the rows' dtype (the kernels' NORM_OUT; their own compile unit, so the others keep their code)."""

    out_dtype: dtypes.QuantDType = dtypes.FLOAT8_E4M3FN
    mode: str = "static"
    round_input: bool = False
    group_size: int = 0  # per_group: elements per group (QUANT_GROUPS); 0 for the other modes
    norm_out: bool = False

    kernel = "rms_norm_quant_kernel"
    group_kernel = "rms_norm_group_quant_kernel"  # per_group's entry point (the same row, MODE PER_GROUP)
    source = "rms_norm_quant.cu"

    FLAGS = ("round_input", "norm_out")

    def _expression(self, cache: int, spread: int, early: bool, flags: tuple | None = None, aligned: bool = False) -> str:
        if self.mode == "per_group":
            head = f"pyrms::{self.group_kernel}<{self.dtype.ctype}, {self.out_dtype.ctype}, "
        else:
            head = f"pyrms::{self.kernel}<{self.dtype.ctype}, {self.out_dtype.ctype}, {QUANT_MODES.index(self.mode)}, "
        flags = self._flags() if flags is None else flags
        return f"{head}{', '.join(map(_bool, flags))}, {cache}, {spread}, {_bool(early)}, {_bool(aligned)}>"

    @property
    def group_shift(self) -> int:
        """log2 of the group size: the kernel's group_shift (per_group only)."""
        return self.group_size.bit_length() - 1


@dataclass(frozen=True)
class FusedAddRmsNormQuantPlan(RmsNormQuantPlan):
    """rms_norm_quant.cu's kernel after fused_add_rms_norm's residual add (added_row.cuh)."""

    kernel = "fused_add_rms_norm_quant_kernel"
    group_kernel = "fused_add_rms_norm_group_quant_kernel"


def plan_rms_norm_quant(dtype, hidden: int, out_dtype, *, mode: str = "static", round_input: bool = False,
                        residual: bool = False, group: int | None = None, norm_out: bool = False) -> RmsNormQuantPlan:
    """The plan of rms_norm_quant (residual=True: fused_add_rms_norm_quant; norm_out: with the unquantized
    output beside); ValueError for an unknown
    mode or output dtype, and per group (``group``: 64 or 128, default 128) for a group that does not divide
    hidden or more than MAX_GROUPS groups; a group given to another mode is refused too."""
    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    if mode not in QUANT_MODES:
        raise ValueError(f"mode must be one of {QUANT_MODES}, got {mode!r}")
    if mode != "per_group":
        if group is not None:
            raise ValueError(f"group_size applies to mode='per_group' only, got group_size={group!r} with {mode!r}")
        group = 0
    else:
        group = 128 if group is None else group
        if type(group) is not int or group not in QUANT_GROUPS:
            raise ValueError(f"group_size must be one of {QUANT_GROUPS}, got {group!r}")
        if hidden % group or hidden // group > MAX_GROUPS:
            raise ValueError(f"per_group needs hidden_size a multiple of group_size {group} and at most {MAX_GROUPS} "
                             f"groups ({MAX_GROUPS * group} elements), got hidden_size {hidden}")
    block, cache = block_and_cache(dt, hidden)
    cls = FusedAddRmsNormQuantPlan if residual else RmsNormQuantPlan
    return cls(dt, hidden, block, cache, qt, mode, bool(round_input), group, bool(norm_out))

"""The launch plans of the norm backward that RMSNorm's and LayerNorm's backward share (centered: LayerNorm's,
the mean subtracted): pure, no GPU (on the shared row plan, pyrms/ops/_row_plan.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ... import dtypes
from ...contract import Contract, KernelPlan, contract
from .._row_plan import block_and_cache


# The backward kernels launch at most 512 threads of their own (RMSNorm's V = 2 variant needs
# 128 registers), re-reading their rows (V = 0); the register-cached V = 1, 2 variants are compiled
# too, as candidates for tools/norm_backward/tune.py, which measured them slower (below). Their statistics
# use the forward's fold width (NormBackwardPlan.stats_fold) whatever their block, so they are the forward's
# by construction (row_core.cuh).
BACKWARD_MAX_BLOCK = 512


BACKWARD_VECTORS = (1, 2)


# Backward rows re-read per pass (V = 0), about this many 16-byte vectors per thread: measured on
# the H200 at 16384x5120 bf16 (tools/norm_backward/tune.py; docs/perf_notes.md and docs/family.md),
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


# The staged backward (norm_backward.cuh's norm_backward_staged), for 16-byte aligned operands (the
# launcher checks per call; others take the kernels above): each block pipelines its rows through
# BACKWARD_STAGES buffers of shared memory (cp.async) with BACKWARD_STAGED_THREADS threads; the same
# arithmetic, so the same bits (its dot tree is the plan's `block`, passed as an argument). Planned where
# hidden is a multiple of the vector and its shared memory (sums, weight, stages) fits STAGED_SHARED_LIMIT. Up
# to BACKWARD_STAGED_FEW_ROWS rows it runs one row per block, above it a chunk per block (chunks of 4 rows, against
# one row per block: 512x4096 bf16 14.0 against 19.1 us, 1024x4096 18.5 against 25.6; chunk_rows_for);
# 128, 256 and 512 threads, and 3 stages, measured in docs/perf_notes.md ("The staged backward").
BACKWARD_STAGED_THREADS = 256
# Where 256 threads would own more than 4 vectors each (bf16/fp16 hidden above 8192), the block takes 512, so that
# each owns at most 4 again (4096x16384 bf16: 153.3 against 175.5 us; at 8192, 512 threads were slower, 77.3
# against 73.3, and 384 too, 74.9).
BACKWARD_STAGED_THREADS_WIDE = 512
BACKWARD_STAGED_WIDE_OWNED = 4
BACKWARD_STAGES = 2
BACKWARD_STAGED_FEW_ROWS = 256
STAGED_SHARED_LIMIT = 226 * 1024  # the opt-in maximum (227 KiB) less the kernel's static shared memory
# Where each thread of the staged kernel owns at most this many vectors of the row (bf16/fp16 hidden up to 6144
# at 256 threads), it keeps the chunk's column sums in registers (its HELD template argument) instead of shared
# memory, in the same order: the same bits, with shared memory left to the weight and the row buffers. One plane
# (RMSNorm's dweight) then fits 4 blocks per multiprocessor instead of 3 at hidden 4096 and 5120, by shared memory
# and by registers; two planes (LayerNorm's dweight and dbias, RMSNorm's with a bias) take twice the registers,
# 2 blocks (norm_backward.cuh's staged_min_blocks), as many as their sums in shared memory left room for, and
# leave the shared memory to deeper stages. More vectors cost registers that the blocks need.
STAGED_HELD_MAX = 3
STAGED_HELD_PLANES = 2  # the most planes whose sums are held (staged_min_blocks' register budget)
STAGED_HELD_THREADS = 256  # the most threads of a staged block that holds its sums (the kernels' __launch_bounds__)
# A staged launch of few blocks per multiprocessor (a grid of at most about two blocks each, as 4096 rows make)
# leaves shared memory unused and has one row in flight per block at two stages; it takes as many
# stages (row buffers, up to STAGED_MAX_STAGES: norm_backward.cuh's cp_async_wait) as its blocks per
# multiprocessor leave room for (NormBackwardPlan.staged_launch). Many blocks keep the plan's stages, for more
# blocks per multiprocessor. Shared memory per multiprocessor is Hopper's 228 KiB, the driver reserves 1 KiB per
# block, and the kernel's static shared memory (scratch and mbarriers) takes 576 bytes.
STAGED_MAX_STAGES = 8
SM_SHARED_BYTES = 228 * 1024
BLOCK_SHARED_OVERHEAD = 1024 + 576


def staged_blocks_per_sm(shared_bytes: int, sm_shared: int = SM_SHARED_BYTES) -> int:
    """Blocks of the staged kernel that fit a multiprocessor's `sm_shared` bytes of shared memory with this much
    dynamic shared memory each."""
    return sm_shared // (shared_bytes + BLOCK_SHARED_OVERHEAD)


# dweight/dbias are summed over chunks of rows, then over chunks (norm_backward.cuh). A chunk is GRAD_CHUNK_ROWS
# rows, halved (down to GRAD_MIN_CHUNK_ROWS) while the rows make fewer chunks than wanted: the staged kernel runs a
# chunk per block, and 16-row chunks of 1024 to 4096 rows leave multiprocessors idle. Rows that 256 threads cover
# with at most STAGED_HELD_MAX vectors each (bf16 hidden up to 6144: RMSNorm's sums held in registers, 4 blocks per
# multiprocessor) want GRAD_CHUNKS_WANTED chunks, wider rows (2 blocks per multiprocessor) half as many (bf16, us:
# 1024x4096 35.7 at 16 rows a chunk, 23.0 at 8, 18.5 at 4, 18.9 at 2; 4096x4096 47.8 at 16, 41.0 at 8; but
# 4096x8192 73.3 at 16, 79.3 at 8; docs/perf_notes.md). The chunk depends on the row count, the dtype and hidden
# alone, never on the launch shape, the GPU or the variant: so a weightless backward's dbias stays the weighted
# one's, and RMSNorm-with-a-bias's dweight the plain one's, bit for bit.
GRAD_CHUNK_ROWS = 16
GRAD_MIN_CHUNK_ROWS = 4
GRAD_CHUNKS_WANTED = 512


def owned_vectors(dtype, hidden: int, threads: int) -> int:
    """The most 16-byte vectors of a row of `hidden` elements of `dtype` that one of `threads` threads owns."""
    return -(-(hidden // dtypes.get(dtype).vec_elems) // threads)


def chunk_rows_for(rows: int, dtype, hidden: int) -> int:
    """Rows per chunk of the parameter gradients' sums over `rows` rows of `hidden` elements of `dtype`: a power
    of two that divides GRAD_CHUNK_ROWS, so that rows_per_block (1 or a multiple of GRAD_CHUNK_ROWS) covers whole
    chunks."""
    narrow = owned_vectors(dtype, hidden, STAGED_HELD_THREADS) <= STAGED_HELD_MAX
    wanted = GRAD_CHUNKS_WANTED if narrow else GRAD_CHUNKS_WANTED // 2
    chunk = GRAD_CHUNK_ROWS
    while chunk > GRAD_MIN_CHUNK_ROWS and rows < chunk * wanted:
        chunk //= 2
    return chunk


# A call of at most this many rows given the forward's saved statistics takes one launch (norm_backward.cuh's
# norm_backward_few: a block per row for dx, and blocks of 32 columns summing the parameter gradients from the
# rows, each of 32 lanes one chunk), where its chunks are of at most FEW_CHUNK_ROWS rows and the plan's block has
# at most FEW_MAX_THREADS threads (the kernel's constants of those names).
FEW_CHUNK_ROWS = GRAD_MIN_CHUNK_ROWS
FEW_MAX_THREADS = 512
ONE_LAUNCH_ROWS = 32 * FEW_CHUNK_ROWS

# A chunk's column sums live in shared memory when they fit in this many bytes, else in the workspace.
SHARED_SUMS_LIMIT = 96 * 1024


def _sum_partials(dtype: dtypes.DType) -> dict[str, None]:
    return dict.fromkeys(f"pyrms::sum_partials_kernel<{d.ctype}>" for d in (dtype, dtypes.FLOAT32))


# The weight kinds of a backward (a compile unit each): of the rows' dtype, float32 beside bf16/fp16 rows
# (with an fp32 or a rows'-dtype grad_output), none.
WEIGHT_KINDS = ("same", "float32", "none")


def _backward_group(dtype: dtypes.DType, centered: bool, weight: str) -> tuple[str, ...]:
    """The backward kernels of one dtype and weight kind: every V, gemma (RMSNorm with a weight), dbias
    (LayerNorm without a weight) and grad_output dtype (fp32 weights) variant, and the sums over rows
    where any variant has them. The register-cached V > 0 variants (tuning candidates) are compiled for
    weights of the rows' dtype only."""
    weightless, fp32 = weight == "none", weight == "float32"
    grad_dtype = dtypes.FLOAT32 if fp32 else dtype
    variants = [NormBackwardPlan(dtype, 0, 32, v, centered, g, grad_dtype, weightless=weightless, grad_bias=b,
                                 fp32_weight=fp32, fp32_grad_output=d)
                for v in ((0,) if fp32 else (0, *BACKWARD_VECTORS))
                for g in ((False,) if centered or weightless else (False, True))
                for b in ((True, False) if centered and weightless else (True,))
                for d in ((False, True) if fp32 else (False,))]
    if not centered:  # RMSNorm with a bias: dbias summed too, rows re-read (V = 0), no gemma
        variants += [NormBackwardPlan(dtype, 0, 32, 0, False, False, grad_dtype, weightless=weightless, fp32_weight=fp32,
                                      fp32_grad_output=d, bias=True) for d in ((False, True) if fp32 else (False,))]
    sums = _sum_partials(dtype) if any(p.params for p in variants) else {}
    few = dict.fromkeys(p.few_expression for p in variants if p.params and not p.vectors)
    # every variant's staged kernel, and those that sum a plane or two with the sums held in registers, by HELD
    staged = dict.fromkeys(replace(p, held=held).staged_expression for p in variants
                           for held in (0, *(range(1, STAGED_HELD_MAX + 1) if p.params else ())))
    return tuple(p.expression for p in variants) + tuple(staged) + tuple(few) + tuple(sums)


@dataclass(frozen=True)
class NormBackwardPlan(KernelPlan):
    """The backward of RMSNorm (centered=False) or LayerNorm (centered=True): cuda_src/norm_backward.cuh.

    weightless: no weight (every weight 1, the kernels' W = void): dx only, no dweight; its columns
    split as a 16-byte aligned weight's, so dx is bitwise a weighted backward's with such a weight of
    ones. fp32_weight: a float32 weight beside bf16/fp16 rows (W = float; the parameter gradients in
    float32); fp32_grad_output: grad_output in float32 (G = float, the gradient of the float32 output such
    a weight gives), with fp32_weight only. Both are read exactly, so neither changes the arithmetic. grad_bias: whether a LayerNorm without weight sums grad_bias (with a weight the kernel always
    does: one variant, the launch sums the plane only when asked). Nothing summed (RMSNorm without a
    weight, LayerNorm without weight and grad_bias): no workspace and no second kernel."""

    dtype: dtypes.DType
    hidden: int
    block: int
    vectors: int  # 16-byte vectors of x and dy per thread kept in registers (0: re-read)
    centered: bool
    gemma: bool
    grad_dtype: dtypes.DType  # of dweight (and dbias): dtype or float32
    chunk_rows: int | None = None  # rows per chunk of the parameter gradients' sums; None: by the row count
    weightless: bool = False
    grad_bias: bool = True  # LayerNorm without a weight only (see above)
    threads: int = 0  # the staged kernel's threads per block (0: no staged kernel)
    stages: int = 0  # the staged kernel's row buffers (0: no staged kernel)
    fp32_weight: bool = False
    fp32_grad_output: bool = False
    bias: bool = False  # RMSNorm with a bias (LayerNorm's kernel's RMS forward): dbias summed too
    held: int = 0  # the staged kernel's vectors per thread whose column sums stay in registers (0: shared memory)
    deepen: bool = True  # a staged launch of few blocks per multiprocessor may take more stages (staged_launch)

    def __post_init__(self):
        if self.bias and (self.centered or self.gemma):
            raise ValueError("bias is RMSNorm's with a bias, without gemma (LayerNorm's is grad_bias)")
        if self.fp32_weight and (self.weightless or self.dtype.itemsize != 2 or self.grad_dtype is not dtypes.FLOAT32):
            raise ValueError(f"a float32 weight goes beside bfloat16 or float16 rows, with float32 parameter gradients; "
                             f"got {self.dtype.name} rows, grad_dtype {self.grad_dtype.name}"
                             + (", no weight" if self.weightless else ""))
        if self.fp32_grad_output and not self.fp32_weight:
            raise ValueError("a float32 grad_output goes with a float32 weight beside bfloat16 or float16 rows (the "
                             "float32 output such a weight gives)")
        if self.fp32_weight and self.vectors:
            raise ValueError("the register-cached backward (vectors > 0) is compiled for weights of the rows' dtype only")
        if self.vectors and self.stats_fold > self.block:  # row_core.cuh: only re-reading rows fold wider
            raise ValueError(f"a backward that keeps {self.vectors} vectors per thread needs at least the fold's "
                             f"{self.stats_fold} threads, got {self.block}")
        if self.held and (not 0 < self.params <= STAGED_HELD_PLANES or self.threads > STAGED_HELD_THREADS
                          or self.held * max(self.threads, 1) * self.dtype.vec_elems < self.hidden):
            raise ValueError(f"held sums need 1 to {STAGED_HELD_PLANES} parameter planes, at most "
                             f"{STAGED_HELD_THREADS} threads and every vector owned: got held={self.held}, "
                             f"{self.params} planes, {self.threads} threads, hidden {self.hidden}")
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
        """The kernel source, named as its kernels (one source per op: docs/architecture.md)."""
        return self.kernel.removesuffix("_kernel") + ".cu"

    @property
    def kernel(self) -> str:
        """Kernel 1 (KernelPlan gives its contract and signature)."""
        return "layer_norm_backward_kernel" if self.centered else "rms_norm_backward_kernel"

    @property
    def sum_contract(self) -> Contract:
        """Kernel 2's (the sums over row chunks)."""
        return contract("norm_backward.cuh", "sum_partials_kernel")

    @property
    def _type_args(self) -> dict[str, str]:
        """The weight's (W) and grad_output's (G) template arguments, where they are not the rows' dtype."""
        args = {"W": "void"} if self.weightless else {"W": "float"} if self.fp32_weight else {}
        return {**args, "G": "float"} if self.fp32_grad_output else args

    @property
    def expression(self) -> str:
        if self.centered:  # DBIAS: without a weight, whether dbias is summed (always with one)
            return self.contract.expression(T=self.dtype.ctype, V=self.vectors, DBIAS=self.sums_bias, **self._type_args)
        return self.contract.expression(T=self.dtype.ctype, V=self.vectors, GEMMA=self.gemma, DBIAS=self.bias,
                                        **self._type_args)

    @property
    def staged_contract(self) -> Contract:
        """The staged kernel's (norm_backward_staged: 16-byte aligned operands)."""
        kernel = "layer_norm_backward_staged_kernel" if self.centered else "rms_norm_backward_staged_kernel"
        return contract(self.source, kernel)

    @property
    def staged_expression(self) -> str:
        """The staged kernel of the same variant."""
        if self.centered:
            return self.staged_contract.expression(T=self.dtype.ctype, DBIAS=self.sums_bias, HELD=self.held,
                                                   **self._type_args)
        return self.staged_contract.expression(T=self.dtype.ctype, GEMMA=self.gemma, DBIAS=self.bias, HELD=self.held,
                                               **self._type_args)

    @property
    def few_contract(self) -> Contract:
        """The one-launch kernel of few rows given their saved statistics (norm_backward_few)."""
        return contract(self.source, self.kernel.removesuffix("_kernel") + "_few_kernel")

    @property
    def few_expression(self) -> str:
        """The one-launch kernel of the same variant."""
        if self.centered:
            return self.few_contract.expression(T=self.dtype.ctype, DBIAS=self.sums_bias, **self._type_args)
        return self.few_contract.expression(T=self.dtype.ctype, GEMMA=self.gemma, DBIAS=self.bias, **self._type_args)

    def one_launch_rows(self) -> int:
        """The most rows a call given the saved statistics launches once for (norm_backward_few), 0 where it never
        does: nothing summed over rows (then kernel 1 alone is one launch), more threads than FEW_MAX_THREADS, or
        chunks of more than FEW_CHUNK_ROWS rows at that row count."""
        if not self.params or self.block > FEW_MAX_THREADS or self.chunk_for(ONE_LAUNCH_ROWS) > FEW_CHUNK_ROWS:
            return 0
        return 32 * self.chunk_for(ONE_LAUNCH_ROWS)

    def staged_shape(self, threads: int, stages: int, held: int | None = None) -> "NormBackwardPlan":
        """This plan with the staged kernel at `threads` threads and `stages` row buffers, its column sums in
        registers (`held` vectors a thread) or shared memory (0); held None: in registers where one or two planes
        are summed and each thread owns at most STAGED_HELD_MAX vectors (ValueError for a held that cannot be)."""
        if held is None:
            owned = owned_vectors(self.dtype, self.hidden, threads)
            held = owned if (0 < self.params <= STAGED_HELD_PLANES and owned <= STAGED_HELD_MAX
                             and threads <= STAGED_HELD_THREADS) else 0
        return replace(self, threads=threads, stages=stages, held=held)

    def staged_slots(self, rows_per_block: int) -> int:
        """Row buffers of the staged kernel's shared memory: its stages, or a block's rows if fewer."""
        return min(self.stages, rows_per_block)

    @property
    def weight_itemsize(self) -> int:
        """Bytes per weight element (0: no weight)."""
        return 0 if self.weightless else 4 if self.fp32_weight else self.dtype.itemsize

    @property
    def grad_output_itemsize(self) -> int:
        return 4 if self.fp32_grad_output else self.dtype.itemsize

    def staged_shared_bytes(self, slots: int) -> int:
        """Dynamic shared memory of the staged kernel with `slots` row slots: the chunk's column sums (none
        where they are held in registers), the weight, and per slot a row of x and one of dy."""
        row = self.dtype.itemsize + self.grad_output_itemsize
        # an fp32 weight beside 2-byte rows is read from global memory (norm_backward.cuh: staged_weight_bytes)
        weight = 0 if self.fp32_weight else self.weight_itemsize
        sums = 0 if self.held else 4 * self.params
        return self.hidden * (sums + weight + row * slots)

    def staged_launch(self, rows_per_block: int, blocks: int, sms: int, sm_shared: int = SM_SHARED_BYTES,
                      limit: int = STAGED_SHARED_LIMIT) -> tuple[int, int]:
        """(stages, dynamic shared bytes) of a staged launch of `blocks` blocks of `rows_per_block` rows on `sms`
        multiprocessors of `sm_shared` bytes of shared memory, `limit` bytes at most a block: the plan's stages,
        or for a grid of at most two blocks per multiprocessor as many as leave room for them (STAGED_MAX_STAGES
        at most, no more than the block's rows). Only the pipeline's depth changes, never the arithmetic."""
        stages = self.stages
        per_sm = -(-blocks // sms)
        if self.deepen and rows_per_block > 1 and per_sm <= 2:
            while (stages < min(STAGED_MAX_STAGES, rows_per_block)
                   and self.staged_shared_bytes(stages + 1) <= limit
                   and staged_blocks_per_sm(self.staged_shared_bytes(stages + 1), sm_shared) >= per_sm):
                stages += 1
        return stages, self.staged_shared_bytes(min(stages, rows_per_block))

    @property
    def sum_expression(self) -> str:
        return self.sum_contract.expression(OutT=self.grad_dtype.ctype)

    @property
    def group(self) -> tuple[str, ...]:
        """The compile unit: every backward variant of the dtype and weight kind, and the sums over rows."""
        return _backward_group(self.dtype, self.centered, self.weight_kind)

    @property
    def weight_kind(self) -> str:
        """WEIGHT_KINDS: the compile unit's weight."""
        return "none" if self.weightless else "float32" if self.fp32_weight else "same"

    @cached_property
    def sums_bias(self) -> bool:
        """Whether kernel 1 sums dbias: LayerNorm's always beside dweight, without a weight for grad_bias;
        RMSNorm's with a bias."""
        return self.centered and (self.grad_bias or not self.weightless) or self.bias

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

    def chunk_for(self, rows: int) -> int:
        """Rows per chunk of a call of `rows` rows: the plan's chunk_rows, or by the row count (chunk_rows_for)."""
        return self.chunk_rows or chunk_rows_for(rows, self.dtype, self.hidden)

    def chunks(self, rows: int) -> int:
        return -(-rows // self.chunk_for(rows))

    def rows_per_block(self, rows: int, staged: bool = False) -> int:
        """The planned rows per block of kernel 1: one for few rows, else a chunk (staged: the staged
        kernel's threshold)."""
        return 1 if rows <= (BACKWARD_STAGED_FEW_ROWS if staged else BACKWARD_FEW_ROWS) else self.chunk_for(rows)

    def workspace_rows(self, rows: int, rows_per_block: int | None = None) -> int:
        """Rows of each workspace plane: one per chunk, or one per input row with one row per block
        (rows_per_block None: the planned one)."""
        if rows_per_block is None:
            rows_per_block = self.rows_per_block(rows)
        return rows if rows_per_block == 1 else self.chunks(rows)

    def workspace_bytes(self, rows: int, rows_per_block: int | None = None) -> int:
        return self.params * self.workspace_rows(rows, rows_per_block) * self.ws_stride * 4


def plan_norm_backward(dtype, hidden: int, *, centered: bool = False, gemma: bool = False,
                       grad_dtype=None, weight: bool = True, grad_bias: bool | None = None, weight_dtype=None,
                       grad_output_dtype=None) -> NormBackwardPlan:
    """centered: LayerNorm's backward (the mean subtracted; no gemma), else RMSNorm's. weight=False: no weight
    (weight=None); grad_bias: LayerNorm's grad_bias is summed (the default; False:
    a LayerNorm without a weight sums none either), RMSNorm's a bias's gradient (default none: NormBackwardPlan
    says what each sums). weight_dtype: None or the dtype (the
    default), or float32 beside bf16/fp16 rows (then grad_dtype, by default the weight's, must be
    float32); grad_output_dtype: None or the dtype, or float32 beside a float32 weight."""
    dt = dtypes.get(dtype)
    wdt = dt if weight_dtype is None else dtypes.get(weight_dtype)
    if wdt not in (dt, dtypes.FLOAT32) or (wdt is not dt and dt.itemsize != 2):
        raise ValueError(f"weight_dtype must be {dt.name}" + (" or float32" if dt.itemsize == 2 else "")
                         + f", got {wdt.name}")
    fp32_weight = weight and wdt is not dt
    gdt = (dtypes.FLOAT32 if fp32_weight else dt) if grad_dtype is None else dtypes.get(grad_dtype)
    if gdt not in (wdt, dtypes.FLOAT32):
        raise ValueError(f"grad_dtype must be {wdt.name}" + ("" if wdt is dtypes.FLOAT32 else " or float32")
                         + f", got {gdt.name}")
    odt = dt if grad_output_dtype is None else dtypes.get(grad_output_dtype)
    if odt is not dt and not (fp32_weight and odt is dtypes.FLOAT32):
        also = " or float32" if fp32_weight else " (float32 only beside a float32 weight)" if dt.itemsize == 2 else ""
        raise ValueError(f"grad_output_dtype must be {dt.name}{also}, got {odt.name}")
    if centered and gemma:
        raise ValueError("gemma applies to RMSNorm only")
    block, vectors = backward_block(dt, hidden), 0
    bias = not centered and bool(grad_bias)
    if bias and gemma:
        raise ValueError("gemma with a bias is not offered (the forward of RMSNorm with a bias has no gemma)")
    p = NormBackwardPlan(dt, hidden, block, vectors, bool(centered), bool(gemma), gdt, weightless=not weight,
                         grad_bias=grad_bias is not False, fp32_weight=fp32_weight, fp32_grad_output=odt is not dt,
                         bias=bias)
    if hidden % dt.vec_elems == 0:
        wide = owned_vectors(dt, hidden, BACKWARD_STAGED_THREADS) > BACKWARD_STAGED_WIDE_OWNED
        threads = BACKWARD_STAGED_THREADS_WIDE if wide else min(BACKWARD_STAGED_THREADS,
                                                                owned_vectors(dt, hidden, 32) * 32)
        for stages in range(BACKWARD_STAGES, 1, -1):  # as many buffers as fit, at least two
            staged = p.staged_shape(threads, stages)
            if staged.staged_shared_bytes(stages) <= STAGED_SHARED_LIMIT:
                return staged
    return p

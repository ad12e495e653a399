"""qk_norm_rope's launch plan: pure, no GPU. The heads are RMSNorm rows of head_dim elements packed several
to a warp, in the shape (and so the reduction tree) that the row core's packed rows take for (dtype, head_dim):
pyrms/ops/_row_plan.py's packed_shape of the row plan's block and cache."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from ...contract import KernelPlan
from .._row_plan import PACKED_SHAPES, PACKED_THREADS, block_and_cache, packed_shape


@dataclass(frozen=True)
class QkNormRopePlan(KernelPlan):
    """qk_norm_rope.cu's kernel for heads of ``head_dim`` elements of ``dtype``: ``lanes`` lanes per head,
    each holding ``cache`` vectors; the sum of squares folds over ``fold`` = 32 positions (the row core's F)."""

    dtype: dtypes.DType
    head_dim: int
    lanes: int
    cache: int
    gemma: bool = False
    is_neox: bool = True

    source = "qk_norm_rope.cu"
    kernel = "qk_norm_rope_kernel"
    FLAGS = ("gemma", "is_neox")  # the kernel's bool template flags, in template order
    block = PACKED_THREADS  # threads per block
    fold = 32  # the reduction tree's fold width (the twin's block)

    @property
    def rows_per_block(self) -> int:
        return PACKED_THREADS // self.lanes

    def _expression(self, lanes: int, cache: int, aligned: bool) -> str:
        return self.contract.expression(T=self.dtype.ctype, CACHE=cache, LANES=lanes, ALIGNED=aligned,
                                        GEMMA=self.gemma, IS_NEOX=self.is_neox)

    @property
    def expression(self) -> str:
        """The kernel for any element-aligned operands."""
        return self._expression(self.lanes, self.cache, False)

    @property
    def aligned_expression(self) -> str:
        """The kernel for 16-byte aligned qkv and weights, head_dim and token stride whole vectors (ALIGNED)."""
        return self._expression(self.lanes, self.cache, True)

    def aligned_layout(self, token_stride: int) -> bool:
        """Whether heads at this token stride (elements) can take the ALIGNED kernel, given aligned pointers."""
        return self.head_dim % self.dtype.vec_elems == 0 and token_stride % self.dtype.vec_elems == 0

    @property
    def group(self) -> tuple[str, ...]:
        """Every packed shape of one (dtype, gemma, is_neox), aligned or not: one NVRTC run whatever head_dim."""
        return tuple(self._expression(n, c, a) for n, c in PACKED_SHAPES for a in (False, True))


def plan_qk_norm_rope(dtype, head_dim: int, *, gemma: bool = False, is_neox: bool = True) -> QkNormRopePlan:
    """The plan for heads of ``head_dim`` elements of ``dtype`` (bfloat16, float16 or float32); ValueError for
    another dtype or a head too long to pack into one warp (more than 32 * 4 vectors)."""
    dt = dtypes.get(dtype)
    if isinstance(head_dim, bool) or type(head_dim) is not int or head_dim <= 0:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    lanes, cache = packed_shape(dt, head_dim, *block_and_cache(dt, head_dim))
    if not lanes:
        raise ValueError(f"head_dim must be at most {32 * 4 * dt.vec_elems} for {dt.name} (one warp per head), "
                         f"got {head_dim}")
    return QkNormRopePlan(dt, head_dim, lanes, cache, bool(gemma), bool(is_neox))

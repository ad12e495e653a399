"""rms_norm's launch plans: pure, no GPU (on the RMSNorm row's plan, pyrms/ops/_rms_row_plan.py, and the shared
row plan, pyrms/ops/_row_plan.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from ...contract import Contract, contract
from .._rms_row_plan import RmsRowPlan, rms_weight_kind
from .._row_plan import CACHE_CHOICES, PACKED_SHAPES, PACKED_THREADS, block_and_cache, out_kind, packed_shape


@dataclass(frozen=True)
class RmsNormPlan(RmsRowPlan):
    """For rms_norm.cu: the RMSNorm row's plan, with the N-D kernel's packed rows."""

    kernel = "rms_norm_kernel"
    source = "rms_norm.cu"

    @property
    def packed_shape(self) -> tuple[int, int]:
        """(LANES, CACHE) of the packed kernel, or (0, 0) where rows are too long to pack (_row_plan.packed_shape)."""
        return packed_shape(self.dtype, self.hidden, self.block, self.cache)

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

    @property
    def nd_contract(self) -> Contract:
        """rms_norm_nd_kernel's template and launch parameters."""
        return contract(self.source, "rms_norm_nd_kernel")

    def _nd(self, lanes: int, cache: int, aligned: bool = False) -> str:
        return self.nd_contract.expression(T=self.dtype.ctype, CACHE=cache, LANES=lanes, ALIGNED=aligned,
                                           **dict(zip(map(str.upper, self.FLAGS), self._flags())), **self._type_params())

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


def kernel_expression(dtype: dtypes.DType, cache: int, spread: int, gemma: bool, round_once: bool,
                      early_weights: bool = False, aligned: bool = False) -> str:
    """The name expression of one rms_norm.cu variant (for tools that time variants one by one)."""
    return RmsNormPlan(dtype, 0, 0, cache, gemma, round_once)._expression(cache, spread, early_weights, aligned=aligned)


def variant_group(dtype: dtypes.DType, gemma: bool, round_once: bool) -> tuple[str, ...]:
    """Every variant of rms_norm.cu for one (dtype, options): one NVRTC run."""
    return RmsNormPlan(dtype, 0, 0, 0, gemma, round_once).group


def plan_rms_norm(dtype, hidden: int, *, gemma: bool = False, round_once: bool = False,
                  weight_dtype=None, out_dtype=None) -> RmsNormPlan:
    """weight_dtype: None or the dtype (the default), float32, or "none" (no weight); out_dtype: None or
    the dtype (the default), or float32 beside bf16/fp16 rows."""
    dt = dtypes.get(dtype)
    block, cache = block_and_cache(dt, hidden)
    return RmsNormPlan(dt, hidden, block, cache, bool(gemma), bool(round_once), rms_weight_kind(dt, weight_dtype, gemma),
                       out_kind(dt, out_dtype))

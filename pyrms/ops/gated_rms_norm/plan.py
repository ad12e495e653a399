"""gated_rms_norm's launch plans, forward and backward: pure, no GPU. Each (row, group) is a row of the row core of
``group_size`` elements, planned as the RMSNorm row of that width is (pyrms/ops/_row_plan.py's block_and_cache), so
its sum of squares is that row's reduction tree for (dtype, group_size, alignment); in the backward, a row of
RMSNorm's backward of that width (pyrms/ops/_norm_backward/plan.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from ... import dtypes
from ...contract import Contract, KernelPlan, contract
from .._norm_backward.plan import BACKWARD_FEW_ROWS, SHARED_SUMS_LIMIT, backward_block, chunk_rows_for
from .._row_plan import _RowPlan, _type_params, block_and_cache, weight_kind


@dataclass(frozen=True)
class GatedRmsNormPlan(_RowPlan):
    """gated_rms_norm.cu's kernel for groups of ``hidden`` (= group_size) elements of ``dtype``: ``norm_before_gate``
    picks the order (rmsnorm(x) * w * silu(z), or rmsnorm(x * silu(z)) * w); ``weight`` one of WEIGHT_KINDS."""

    norm_before_gate: bool = True
    weight: str = "same"  # WEIGHT_KINDS

    kernel = "gated_rms_norm_kernel"
    source = "gated_rms_norm.cu"
    FLAGS = ("norm_before_gate",)

    def _type_params(self) -> dict:
        return {"W": _type_params(self.dtype, self.weight, "same")["W"]}

    @property
    def weight_dtype(self) -> dtypes.DType | None:
        """The weight's dtype (None: no weight)."""
        return _weight_dtype(self.dtype, self.weight)


def _weight_dtype(dtype: dtypes.DType, kind: str) -> dtypes.DType | None:
    """The dtype of a weight of `kind` (WEIGHT_KINDS) beside rows of `dtype`; None for no weight."""
    return {"same": dtype, "float32": dtypes.FLOAT32, "none": None}[kind]


def group_size_arg(group_size, hidden: int) -> int:
    """group_size: None (hidden: one group) or a positive int dividing hidden; ValueError naming both otherwise."""
    if group_size is None:
        return hidden
    if isinstance(group_size, bool) or type(group_size) is not int or group_size <= 0:
        raise ValueError(f"group_size must be a positive int dividing hidden_size ({hidden}), got {group_size!r}")
    if hidden % group_size:
        raise ValueError(f"group_size must divide hidden_size: hidden_size={hidden} is not a multiple of "
                         f"group_size={group_size}")
    return group_size


def plan_gated_rms_norm(dtype, group_size: int, *, norm_before_gate: bool = True,
                        weight_dtype=None) -> GatedRmsNormPlan:
    """The plan for groups of ``group_size`` elements of ``dtype`` (bfloat16, float16 or float32); weight_dtype:
    None or the dtype (the default), float32 beside bf16/fp16 rows, or "none" (no weight)."""
    dt = dtypes.get(dtype)
    block, cache = block_and_cache(dt, group_size)
    kind = "same" if weight_dtype is None else weight_kind(dt, weight_dtype)
    return GatedRmsNormPlan(dt, group_size, block, cache, bool(norm_before_gate), kind)


@dataclass(frozen=True)
class GatedRmsNormBackwardPlan(KernelPlan):
    """gated_rms_norm_backward.cu's kernel for rows of ``hidden`` elements of ``dtype`` in groups of ``group_size``:
    each (row, group) a row of RMSNorm's backward of group_size columns (its block, re-read rows), the statistics in
    the forward's fold (``fold``), so the forward's bits; dweight's terms summed per chunk of rows (chunk_rows_for,
    by the row count alone) and then over chunks by norm_backward.cuh's sum_partials_kernel. ``weight`` one of
    WEIGHT_KINDS (none: no dweight, no workspace, one launch)."""

    dtype: dtypes.DType
    hidden: int
    group_size: int
    norm_before_gate: bool = True
    weight: str = "same"

    kernel = "gated_rms_norm_backward_kernel"
    source = "gated_rms_norm_backward.cu"
    FLAGS = ("norm_before_gate",)

    def __post_init__(self):
        if self.group_size <= 0 or self.hidden % self.group_size:
            raise ValueError(f"group_size must divide hidden_size: got hidden_size={self.hidden}, "
                             f"group_size={self.group_size}")
        if self.groups > MAX_GROUPS:
            raise ValueError(f"the backward takes at most {MAX_GROUPS} groups a row (a grid dimension), got "
                             f"hidden_size / group_size = {self.hidden} / {self.group_size} = {self.groups}")

    @property
    def groups(self) -> int:
        return self.hidden // self.group_size

    @cached_property
    def block(self) -> int:
        """Threads per block: RMSNorm's backward's for a row of group_size (which then loops over it)."""
        return backward_block(self.dtype, self.group_size)

    @cached_property
    def fold(self) -> int:
        """The statistics' fold width: the forward's block for (dtype, group_size), so its inv bit for bit."""
        return block_and_cache(self.dtype, self.group_size)[0]

    @property
    def weightless(self) -> bool:
        return self.weight == "none"

    @property
    def grad_dtype(self) -> dtypes.DType | None:
        """dweight's dtype: the weight's (None: no weight)."""
        return _weight_dtype(self.dtype, self.weight)

    @property
    def expression(self) -> str:
        return self.contract.expression(T=self.dtype.ctype, NORM_BEFORE_GATE=self.norm_before_gate,
                                        W=_type_params(self.dtype, self.weight, "same")["W"])

    @property
    def sum_contract(self) -> Contract:
        """Kernel 2's (the sums over row chunks: norm_backward.cuh's)."""
        return contract("norm_backward.cuh", "sum_partials_kernel")

    @property
    def sum_expression(self) -> str:
        return self.sum_contract.expression(OutT=self.grad_dtype.ctype)

    @property
    def group(self) -> tuple[str, ...]:
        """The compile unit: both orders of the dtype and weight kind, and the sums over rows where summed."""
        both = [replace(self, norm_before_gate=flag).expression for flag in (True, False)]
        return tuple(both) + ((() if self.weightless else (self.sum_expression,)))

    def chunk_for(self, rows: int) -> int:
        """Rows per chunk of dweight's sums: RMSNorm's backward's for the whole row (by the row count alone)."""
        return chunk_rows_for(rows, self.dtype, self.hidden)

    def rows_per_block(self, rows: int) -> int:
        """One row per block while the (row, group) blocks are few, else a chunk per block."""
        return 1 if rows * self.groups <= BACKWARD_FEW_ROWS else self.chunk_for(rows)

    @cached_property
    def ws_stride(self) -> int:
        """Floats per workspace row: a multiple of 4 (16 bytes) >= hidden + 7, room for the weight's phase."""
        return -(-(self.hidden + 7) // 4) * 4

    def workspace_rows(self, rows: int) -> int:
        """Rows of the workspace: one per input row with one row per block, else one per chunk."""
        return rows if self.rows_per_block(rows) == 1 else -(-rows // self.chunk_for(rows))

    def workspace_bytes(self, rows: int) -> int:
        return 0 if self.weightless else 4 * self.workspace_rows(rows) * self.ws_stride

    @cached_property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of kernel 1: a block's column sums (group_size + its phase), or 0 to keep them in
        the workspace (too large, or no weight)."""
        nbytes = 0 if self.weightless else 4 * (-(-(self.group_size + 7) // 4) * 4)
        return nbytes if nbytes <= SHARED_SUMS_LIMIT else 0


# blockIdx.y is the group: CUDA's grid y dimension.
MAX_GROUPS = 65535


def plan_gated_rms_norm_backward(dtype, hidden: int, group_size: int, *, norm_before_gate: bool = True,
                                 weight_dtype=None) -> GatedRmsNormBackwardPlan:
    """The backward's plan for rows of ``hidden`` elements of ``dtype`` in groups of ``group_size``; weight_dtype
    as plan_gated_rms_norm's."""
    dt = dtypes.get(dtype)
    kind = "same" if weight_dtype is None else weight_kind(dt, weight_dtype)
    return GatedRmsNormBackwardPlan(dt, hidden, group_size, bool(norm_before_gate), kind)

"""gated_rms_norm's launch plan: pure, no GPU. Each (row, group) is a row of the row core of ``group_size``
elements, planned as the RMSNorm row of that width is (pyrms/ops/_row_plan.py's block_and_cache), so its sum of
squares is that row's reduction tree for (dtype, group_size, alignment)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
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
        return {"same": self.dtype, "float32": dtypes.FLOAT32, "none": None}[self.weight]


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

"""The RMSNorm row's plan, which the RMSNorm forward's kernel and the fused residual add's share (both
normalize on cuda_src/rms_norm_row.cuh): its options, which are the kernels' bool template flags (FLAGS), and
its weight and output kinds. Each op's plan, in its folder's plan.py, builds on it. Pure, no GPU."""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes
from ._row_plan import _RowPlan, _WeightAndOutKinds, weight_kind


# How the fused residual add (cuda_src/added_row.cuh) sums input and residual, for the fused add and the quantizing
# fused add alike: "rounded" normalizes the sum rounded to the residual's dtype (vLLM's), "fp32" the fp32 sum
# (FlashInfer's), the residual storing it rounded either way.
SUM_PRECISIONS = ("rounded", "fp32")


@dataclass(frozen=True)
class RmsRowPlan(_WeightAndOutKinds, _RowPlan):
    """A plan of a kernel on the RMSNorm row: gemma scales by 1 + weight, round_once rounds the normalized row
    once (after the weight); ``weight`` one of WEIGHT_KINDS, ``out`` one of OUT_KINDS (pyrms/ops/_row_plan.py)."""

    gemma: bool = False
    round_once: bool = False
    weight: str = "same"  # WEIGHT_KINDS
    out: str = "same"  # OUT_KINDS

    FLAGS = ("gemma", "round_once")

    @property
    def weight_dtype(self) -> dtypes.DType | None:
        """The weight's dtype (None: no weight)."""
        return {"same": self.dtype, "float32": dtypes.FLOAT32, "none": None}[self.weight]

    @property
    def weight_itemsize(self) -> int:
        """Bytes per weight element (0: no weight)."""
        return self.weight_dtype.itemsize if self.weight_dtype else 0


def rms_weight_kind(dt: dtypes.DType, weight_dtype, gemma: bool) -> str:
    """The weight kind (WEIGHT_KINDS) of an RMSNorm row with a weight of ``weight_dtype`` (None: the rows'
    dtype, "none": no weight); ValueError for gemma without a weight."""
    kind = "same" if weight_dtype is None else weight_kind(dt, weight_dtype)
    if kind == "none" and gemma:
        raise ValueError("gemma needs a weight (it multiplies by 1 + weight); got weight=None")
    return kind

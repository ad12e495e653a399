"""fused_add_rms_norm's launch plans: pure, no GPU (on the RMSNorm row's plan, pyrms/ops/_rms_row_plan.py, and the
shared row plan, pyrms/ops/_row_plan.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from .._rms_row_plan import SUM_PRECISIONS, RmsRowPlan, rms_weight_kind
from .._row_plan import block_and_cache, out_kind


# What fused_add_rms_norm normalizes (docs/numerics.md, "Fused residual add"): the sum rounded to the
# dtype (vLLM's, the default; the sum is stored rounded), or the fp32 sum (FlashInfer's, SGLang's; the
# residual still stores it rounded, or exactly in an fp32 residual: QuACK's, Transformer Engine's).


@dataclass(frozen=True)
class FusedAddRmsNormPlan(RmsRowPlan):
    """For fused_add_rms_norm.cu: the RMSNorm row (rms_norm_row.cuh) with the residual add as its
    source, so the RMSNorm forward's launch shapes and variants (its many-row and few-row kernels; no N-D
    one). sum_precision "fp32" (bf16 and fp16 only) is the fp32-sum kernel, with the residual of the dtype or,
    fp32_residual, of float32. An fp32 output
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

    def _type_params(self) -> dict:
        types = super()._type_params()  # W and O
        if self.sum_precision == "fp32":  # the fp32-sum kernel: W and the residual's R, written over the input
            return {"W": types["W"], "R": self.residual_dtype.ctype}
        return types if self.out == "float32" else {"W": types["W"]}

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
                               rms_weight_kind(dt, weight_dtype, gemma), out, sum_precision, fp32_residual)

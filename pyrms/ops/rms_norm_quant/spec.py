"""The quantizing ops' registry entries: rms_norm_quant and fused_add_rms_norm_quant."""
from __future__ import annotations

from ... import dtypes
from .._spec import Inspect, OpSpec, Unit
from .._rms_row_plan import SUM_PRECISIONS
from .plan import QUANT_MODES, FusedAddRmsNormQuantPlan, RmsNormQuantPlan, plan_rms_norm_quant

_CASE_OPTIONS = ("epsilon", "pdl", "variant", "out_dtype", "mode", "device_scale", "scale_ub", "round_input",
                 "specials", "group_size", "ue8m0", "column_major", "norm_out")
_FUSED_CASE_OPTIONS = _CASE_OPTIONS + ("sum_precision",)


def _spec(residual: bool) -> OpSpec:
    name = "fused_add_rms_norm_quant" if residual else "rms_norm_quant"

    def option_sets(dt) -> list[dict]:
        rows = [dict(out_dtype=q, mode=m, **f) for q in dtypes.QUANTIZED for m in QUANT_MODES for f in spec.flag_sets()]
        if not residual or dt is dtypes.FLOAT32:  # float32's sum is never rounded: its fused add has one semantics
            return rows
        return [{**options, "sum_precision": s} for s in SUM_PRECISIONS for options in rows]

    def unit(dt, hidden, *, out_dtype=None, mode="static", sum_precision=None, **flags) -> Unit:
        # per_group: one unit for both group sizes (a run-time argument); hidden sizes it does not divide have none
        q = plan_rms_norm_quant(dt, hidden, out_dtype or dtypes.FLOAT8_E4M3FN, mode=mode, residual=residual,
                                group=(128 if hidden % 128 == 0 else 64) if mode == "per_group" else None,
                                sum_precision=sum_precision, **flags)
        on = "".join(f" {flag}" for flag, value in flags.items() if value)
        if residual and q.sum_precision == "fp32":
            on += " fp32_sum"
        kernel = q.group_kernel if mode == "per_group" else q.kernel
        return Unit(q.source, tuple(q.group), f"{q.source} {kernel} {dt.name} {q.out_dtype.name} {mode}{on}")

    def operands(*, norm_out=False, **_):
        # out: the quantized bytes (offsets in bytes); scale (fp32): per-token's, or a device scale
        rows = ("input", "residual", "out") if residual else ("input", "out")
        return rows + ("norm_out",) * norm_out, ("weight", "scale", "scale_ub")

    kernel = "fused_add_rms_norm_quant_kernel" if residual else "rms_norm_quant_kernel"
    spec = OpSpec(
        name=name, module="pyrms.ops.rms_norm_quant.op", source=RmsNormQuantPlan.source,
        torch="pyrms.ops.rms_norm_quant.torch_binding",
        plan=FusedAddRmsNormQuantPlan if residual else RmsNormQuantPlan,
        option_sets=option_sets, unit=unit,
        inspect=Inspect("quant", f"pyrms::{kernel} (mode=per_group: the group kernel), planned as the plain RMSNorm row; "
                        "out_dtype=float8_e4m3fn|float8_e5m2|int8, mode=static|per_token|per_group"
                        + ("; fp32_sum = the fp32 sum normalized (sum_precision='fp32')" if residual else ""),
                        lambda dt, hidden: plan_rms_norm_quant(dt, hidden, dtypes.FLOAT8_E4M3FN, residual=residual),
                        {"fp32_sum": False} if residual else {}, out=False),
        twin="pyrms.ops.rms_norm_quant.twin",
        check="quant", operands=operands, case_options=_FUSED_CASE_OPTIONS if residual else _CASE_OPTIONS)
    return spec


SPECS = (_spec(False), _spec(True))

"""fused_add_rms_norm's registry entry."""
from __future__ import annotations

from ... import dtypes
from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, out_options, row_labels, Unit, weight_options
from .plan import FusedAddRmsNormPlan, plan_fused_add_rms_norm

_ABOUT = ("pyrms::fused_add_rms_norm_kernel, planned as the plain RMSNorm row; fp32_sum = the fp32-sum kernel "
          "(fused_add_rms_norm_fp32_sum_kernel), fp32_residual = it with an fp32 residual; out=float32: "
          "fused_add_rms_norm_out_kernel (the rounded sum only)")


def _option_sets(dt) -> list[dict]:
    rows = [dict(weight_dtype=w, out_dtype=o, **f) for o in out_options(dt) for w in weight_options(dt)
            for f in FUSED_ADD_RMS_NORM.flag_sets() if not (f["gemma"] and w == "none")]
    if dt is dtypes.FLOAT32:  # float32's sum is never rounded: one semantics
        return rows
    # the fp32 sum writes over the input: no fp32 output of its own (plan_fused_add_rms_norm)
    sums = [dict(sum_precision="rounded"), dict(sum_precision="fp32"), dict(residual_dtype="float32")]
    return [{**options, **s} for s in sums for options in rows
            if options["out_dtype"] is None or s == dict(sum_precision="rounded")]


def _unit(dt, hidden, *, weight_dtype=None, out_dtype=None, sum_precision=None, residual_dtype=None, **flags) -> Unit:
    p = plan_fused_add_rms_norm(dt, hidden, weight_dtype=weight_dtype, sum_precision=sum_precision,
                                residual_dtype=residual_dtype, out_dtype=out_dtype, **flags)
    label, outs = row_labels(dt, flags, weight_dtype, out_dtype)
    if p.sum_precision == "fp32":
        label += " fp32_sum" + (" residual=float32" if p.fp32_residual else "")
    return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}{label}{outs}")


def _operands(*, weight=True, out=False, **_):
    """input and residual written in place; out only for an fp32 output of its own."""
    return ("input", "residual") + ("out",) * out, ("weight",) * weight


def _model_calls(widths, options, weights, training) -> list[tuple[int, dict]]:
    """The residual add fused into the norm at the hidden size, as vLLM runs decoder layers."""
    return [(widths[0], dict(options))]


FUSED_ADD_RMS_NORM = OpSpec(
    name="fused_add_rms_norm", module="pyrms.ops.fused_add_rms_norm.op", source=FusedAddRmsNormPlan.source,
    torch="pyrms.ops.fused_add_rms_norm.torch_binding",
    plan=FusedAddRmsNormPlan, option_sets=_option_sets, unit=_unit,
    inspect=Inspect("row", _ABOUT, plan_fused_add_rms_norm, {"fp32_sum": False, "fp32_residual": False}, weight=True),
    twin="pyrms.ops.fused_add_rms_norm.twin",
    check="row", operands=_operands,
    case_options=COMMON_CASE_OPTIONS + ("variant", "gemma", "round_once", "sum_precision", "residual_dtype", "out_kind"),
    random=True, bench="pyrms.ops.fused_add_rms_norm.bench", model_calls=_model_calls)

SPECS = (FUSED_ADD_RMS_NORM,)

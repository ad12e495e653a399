"""rms_norm's registry entries: the plain rows and the N-D entry point (its own kernels and units)."""
from __future__ import annotations

from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, out_options, row_labels, row_operands, Unit, weight_options
from .plan import RmsNormPlan, plan_rms_norm

_ABOUT = ("pyrms::rms_norm_kernel; the hidden size (a run-time argument) only picks the planned cache and spread; "
          "few = the few-row kernel; weight=float32|none; out=float32")


def _option_sets(dt) -> list[dict]:
    return [dict(weight_dtype=w, out_dtype=o, **f) for o in out_options(dt) for w in weight_options(dt)
            for f in RMS_NORM.flag_sets() if not (f["gemma"] and w == "none")]  # Gemma's 1 + w needs a weight


def _unit(dt, hidden, *, weight_dtype=None, out_dtype=None, **flags) -> Unit:
    p = plan_rms_norm(dt, hidden, weight_dtype=weight_dtype, out_dtype=out_dtype, **flags)
    label, outs = row_labels(dt, flags, weight_dtype, out_dtype)
    return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}{label}{outs}")


def _nd_unit(dt, hidden, *, weight_dtype=None, out_dtype=None, **flags) -> Unit:
    p = plan_rms_norm(dt, hidden, weight_dtype=weight_dtype, out_dtype=out_dtype, **flags)
    label, outs = row_labels(dt, flags, weight_dtype, out_dtype)
    return Unit(p.source, p.nd_group, f"{p.source} {dt.name} nd{label}{outs}")


def _companions(dt, hidden, **options) -> tuple[str, ...]:
    """The N-D entry point where this width's rows pack several to a warp (QK-norm's head_dim): pyrms.torch's
    rms_norm launches such rows through it."""
    return ("rms_norm_nd",) if plan_rms_norm(dt, hidden, **options).lanes else ()


def _model_calls(widths, options, weights, training) -> list[tuple[int, dict]]:
    """A model's norms (pyrms.torch's modules): each width, each weight dtype."""
    return [(width, {**options, "weight_dtype": w}) for width in widths for w in weights]


RMS_NORM = OpSpec(
    name="rms_norm", module="pyrms.ops.rms_norm.op", source=RmsNormPlan.source, plan=RmsNormPlan,
    torch="pyrms.ops.rms_norm.torch_binding",
    option_sets=_option_sets, unit=_unit, inspect=Inspect("row", _ABOUT, plan_rms_norm, weight=True),
    twin="pyrms.ops.rms_norm.twin",
    check="row", operands=row_operands,
    case_options=COMMON_CASE_OPTIONS + ("variant", "gemma", "round_once", "in_place", "out_kind"), random=True,
    bench="pyrms.ops.rms_norm.bench", companions=_companions, model_calls=_model_calls)

# rms_norm on N-D views, with a weight per outer row, and plain calls of many short rows (packed several to a
# warp): rms_norm.cu's rms_norm_nd_kernel, a unit of its own (RmsNormPlan.nd_group).
RMS_NORM_ND = OpSpec(
    name="rms_norm_nd", module="pyrms.ops.rms_norm.op", source=RmsNormPlan.source, plan=RmsNormPlan,
    torch="pyrms.ops.rms_norm.torch_binding",
    option_sets=_option_sets, unit=_nd_unit,
    inspect=None,
    twin="pyrms.ops.rms_norm.twin",
    check="row", operands=row_operands,
    case_options=COMMON_CASE_OPTIONS + ("gemma", "round_once", "in_place", "sizes", "per_row", "as_arrays", "out_kind"))

SPECS = (RMS_NORM, RMS_NORM_ND)

"""gated_rms_norm's registry entries, forward and backward: the forward's one compile unit per (dtype,
norm_before_gate, weight kind), every launch shape of the row core (so a unit does not depend on hidden_size or
group_size); the backward's one per (dtype, weight kind), both orders and the sums over rows."""
from __future__ import annotations

from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, Unit, row_labels, weight_options
from .plan import GatedRmsNormBackwardPlan, GatedRmsNormPlan, plan_gated_rms_norm, plan_gated_rms_norm_backward


def _option_sets(dt) -> list[dict]:
    return [dict(weight_dtype=w, **f) for w in weight_options(dt) for f in GATED_RMS_NORM.flag_sets()]


def _unit(dt, hidden, *, weight_dtype=None, **flags) -> Unit:
    p = plan_gated_rms_norm(dt, hidden, weight_dtype=weight_dtype, **flags)
    label, _ = row_labels(dt, flags, weight_dtype, None)
    return Unit(p.source, p.group, f"{p.source} {dt.name}{label}")


def _operands(*, weight=True, **_):
    # x, z and out [tokens, hidden], each its own row stride; the weight [hidden]
    return ("x", "z", "out"), ("weight",) * weight


GATED_RMS_NORM = OpSpec(
    name="gated_rms_norm", module="pyrms.ops.gated_rms_norm.op", source=GatedRmsNormPlan.source,
    plan=GatedRmsNormPlan, option_sets=_option_sets, unit=_unit,
    # the "seed" grammar: the planned kernel of one group of `hidden` columns, rmsnorm(x) * w * silu(z)
    inspect=Inspect("seed", "pyrms::gated_rms_norm_kernel, the planned launch shape of one group of hidden "
                            "columns, norm_before_gate (rmsnorm(x) * w * silu(z))", plan_gated_rms_norm),
    twin="pyrms.ops.gated_rms_norm.twin", torch="pyrms.ops.gated_rms_norm.torch_binding",
    bench="pyrms.ops.gated_rms_norm.bench", check="row", operands=_operands,
    case_options=COMMON_CASE_OPTIONS + ("variant", "norm_before_gate", "group_size", "specials"))


def _backward_option_sets(dt) -> list[dict]:
    return [dict(weight_dtype=w) for w in weight_options(dt)]


def _backward_unit(dt, hidden, *, weight_dtype=None, norm_before_gate=False) -> Unit:
    # both orders compile together: norm_before_gate does not change the unit
    p = plan_gated_rms_norm_backward(dt, hidden, hidden, weight_dtype=weight_dtype)
    label, _ = row_labels(dt, {}, weight_dtype, None)
    return Unit(p.source, p.group, f"{p.source} {dt.name}{label}")


def _backward_operands(*, weight=True, **_):
    # grad_output, x, z and the gradients grad_x, grad_z [tokens, hidden], each its own row stride; the weight and
    # grad_weight [hidden]
    return ("grad_output", "x", "z", "grad_x", "grad_z"), ("weight", "grad_weight") * weight


GATED_RMS_NORM_BACKWARD = OpSpec(
    name="gated_rms_norm_backward", module="pyrms.ops.gated_rms_norm.backward",
    source=GatedRmsNormBackwardPlan.source, plan=GatedRmsNormBackwardPlan, own_flags=(),
    option_sets=_backward_option_sets, unit=_backward_unit, inspect=None,
    twin=None,  # its twin is in the forward's module (gated_rms_norm_backward_twin)
    check="gated_backward", operands=_backward_operands, bench="pyrms.ops.gated_rms_norm.bench",
    case_options=COMMON_CASE_OPTIONS + ("norm_before_gate", "group_size", "specials"))

SPECS = (GATED_RMS_NORM, GATED_RMS_NORM_BACKWARD)

"""LayerNorm's registry entries: the forward, the backward (layer_norm_backward.cu), and the forward with a quantized
output (layer_norm_quant)."""
from __future__ import annotations

from functools import partial

from ... import dtypes
from .._norm_backward.plan import BACKWARD_VECTORS, NormBackwardPlan, plan_norm_backward
from .._norm_backward.spec import backward_operands, backward_option_sets, backward_unit
from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, out_options, Unit, weight_options
from .plan import LayerNormPlan, LayerNormQuantPlan, plan_layer_norm, plan_layer_norm_quant

_ABOUT = ("pyrms::layer_norm_kernel (forward), planned on the row core; weightless = no weight; fp32_params = fp32 "
          "weight and bias; out=float32")


def _option_sets(dt) -> list[dict]:
    return [dict(bias=b, rms=r, weight_dtype=w, out_dtype=o) for o in out_options(dt) for w in weight_options(dt)
            for b, r in ((True, False), (False, False), (True, True))]


def _unit(dt, hidden, *, bias=True, rms=False, weight_dtype=None, out_dtype=None) -> Unit:
    # one unit per dtype, weight and output kind: with and without bias; RMSNorm with a bias (rms) one of its own
    p = plan_layer_norm(dt, hidden, bias=bias, weight=weight_dtype != "none",
                        weight_dtype=None if weight_dtype == "none" else weight_dtype, out_dtype=out_dtype, rms=rms)
    label = "" if p.weight == "same" else f" weight={p.weight}"
    outs = " out=float32" if p.out != "same" else ""
    return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}{' rms' if rms else ''}{label}{outs}")


def _operands(*, in_place=None, bias=True, weight=True, **_):
    return ("input",) if in_place else ("input", "out"), ("weight",) * weight + ("bias",) * bias


LAYER_NORM = OpSpec(
    name="layer_norm", module="pyrms.ops.layer_norm.op", source=LayerNormPlan.source, plan=LayerNormPlan, own_flags=(),
    torch="pyrms.ops.layer_norm.torch_binding",
    option_sets=_option_sets, unit=_unit,
    inspect=Inspect("row", _ABOUT, plan_layer_norm, {"bias": True, "weightless": False, "fp32_params": False}),
    twin="pyrms.ops.layer_norm.twin",
    check="row", operands=_operands, case_options=COMMON_CASE_OPTIONS + ("variant", "in_place", "bias", "out_kind", "rms"),
    random=True, bench="pyrms.ops.layer_norm.bench")

LAYER_NORM_BACKWARD = OpSpec(
    name="layer_norm_backward", module="pyrms.ops.layer_norm.op", source="layer_norm_backward.cu", plan=NormBackwardPlan,
    torch="pyrms.ops.layer_norm.torch_binding",
    own_flags=(),
    option_sets=backward_option_sets(True), unit=backward_unit("layer_norm_backward", True),
    inspect=Inspect("backward", "pyrms::layer_norm_backward_kernel (dx and the per-chunk dweight, dbias sums); "
                    "weightless = no weight (dx, and dbias unless grad_bias=false)", partial(plan_norm_backward, centered=True),
                    {"grad_bias": True}, vectors=BACKWARD_VECTORS),
    twin="pyrms.ops.layer_norm.twin",
    check="backward", operands=backward_operands(True),
    case_options=COMMON_CASE_OPTIONS + ("in_place", "grad_bias", "grad_dtype", "rows_per_block", "own_workspace",
                                      "grad_output_kind"),
    random=True)


def _quant_option_sets(dt) -> list[dict]:
    return [dict(out_dtype=q, weight_dtype=w, **flags) for q in dtypes.QUANTIZED for w in weight_options(dt)
            for flags in LAYER_NORM_QUANT.flag_sets()]


def _quant_unit(dt, hidden, *, bias=True, round_input=False, weight_dtype=None, out_dtype=None) -> Unit:
    # one unit per dtype, weight kind, output dtype and flag set (whatever the hidden size)
    p = plan_layer_norm_quant(dt, hidden, out_dtype or dtypes.FLOAT8_E4M3FN, bias=bias, weight=weight_dtype != "none",
                              weight_dtype=None if weight_dtype == "none" else weight_dtype, round_input=round_input)
    on = "".join(f" {flag}" for flag, value in (("bias", bias), ("round_input", round_input)) if value)
    label = "" if p.weight == "same" else f" weight={p.weight}"
    return Unit(p.source, tuple(p.group), f"{p.source} {p.kernel} {dt.name} {p.out_dtype.name}{on}{label}")


def _quant_operands(*, bias=True, weight=True, **_):
    # out: the quantized bytes (offsets in bytes); scale: a device scale (one fp32), where a case has one
    return ("input", "out"), ("weight",) * weight + ("bias",) * bias + ("scale",)


LAYER_NORM_QUANT = OpSpec(
    name="layer_norm_quant", module="pyrms.ops.layer_norm.quant", source=LayerNormQuantPlan.source,
    plan=LayerNormQuantPlan, torch="pyrms.ops.layer_norm.torch_quant",
    option_sets=_quant_option_sets, unit=_quant_unit,
    inspect=Inspect("row", "pyrms::layer_norm_quant_kernel, LayerNorm's row with a static fp8/int8 store (the "
                    "float8_e4m3fn output's); weightless = no weight; fp32_params = fp32 weight and bias",
                    plan_layer_norm_quant, {"weightless": False, "fp32_params": False}, out=False),
    twin="pyrms.ops.layer_norm.twin",
    check="quant", operands=_quant_operands,
    case_options=("epsilon", "pdl", "weight", "variant", "bias", "out_dtype", "device_scale", "round_input",
                  "specials"))

SPECS = (LAYER_NORM, LAYER_NORM_BACKWARD, LAYER_NORM_QUANT)

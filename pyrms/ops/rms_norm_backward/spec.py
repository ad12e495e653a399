"""rms_norm_backward's registry entry, and the backward declarations LayerNorm's backward shares."""
from __future__ import annotations

from functools import partial

from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, Unit, mixed
from .plan import BACKWARD_VECTORS, NormBackwardPlan, plan_norm_backward


def backward_option_sets(layer_norm: bool):
    """Every option set of a backward (RMSNorm's: gemma, both gradient dtypes, no weight; LayerNorm's: both
    gradient dtypes, with and without a weight; beside bf16/fp16 rows, an fp32 weight with either
    grad_output dtype)."""
    def option_sets(dt) -> list[dict]:
        fp32 = [dict(weight_dtype="float32", grad_output_dtype=o) for o in (None, "float32")] if mixed(dt) else []
        if layer_norm:
            return [dict(grad_dtype=d, weight_dtype=w) for d in (None, "float32") for w in (None, "none")] + fp32
        return [dict(gemma=g, grad_dtype=d) for g in (False, True) for d in (None, "float32")] + [
            dict(weight_dtype="none")] + [dict(o, gemma=g) for o in fp32 for g in (False, True)]
    return option_sets


def backward_unit(name: str, layer_norm: bool):
    """The unit of a backward call: one per dtype and weight kind (every option, both gradient dtypes; an
    fp32 weight with both grad_output dtypes); ``name``: the op's, for its errors."""

    def unit(dt, hidden, *, grad_dtype=None, weight_dtype=None, grad_output_dtype=None, **flags) -> Unit:
        if weight_dtype not in (None, "none", "float32"):
            raise ValueError(f"{name}'s weight is of the dtype, float32 or none, got weight_dtype={weight_dtype!r}")
        p = plan_norm_backward(dt, hidden, layer_norm=layer_norm, grad_dtype=grad_dtype, weight=weight_dtype != "none",
                               weight_dtype=None if weight_dtype == "none" else weight_dtype,
                               grad_output_dtype=grad_output_dtype, **flags)
        return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}" + ("" if p.weight_kind == "same"
                                                                       else f" weight={p.weight_kind}"))
    return unit


def backward_operands(layer_norm: bool):
    """(rows, vectors) of a backward case: grad_input beside grad_output and input (or over grad_output), the
    weight and the parameter gradients summed over rows (grad_bias: LayerNorm's unless bias is False, RMSNorm's
    with rms_bias)."""
    def operands(*, in_place=None, bias=True, weight=True, rms_bias=False, **_):
        params = ("grad_weight",) * weight + ("grad_bias",) * (layer_norm and bias or not layer_norm and rms_bias)
        rows = ("grad_output", "input") if in_place else ("grad_output", "input", "grad_input")
        return rows, ("weight",) * weight + params
    return operands


def _model_calls(widths, options, weights, training) -> list[tuple[int, dict]]:
    """In training: each width, each weight dtype, with the forward's gemma."""
    gemma = options.get("gemma", False)
    return [(width, {"gemma": gemma, "weight_dtype": w}) for width in widths for w in weights] if training else []


RMS_NORM_BACKWARD = OpSpec(
    name="rms_norm_backward", module="pyrms.ops.rms_norm_backward.op", source="rms_norm_backward.cu",
    torch="pyrms.ops.rms_norm_backward.torch_binding",
    plan=NormBackwardPlan, own_flags=("gemma",), option_sets=backward_option_sets(False),
    unit=backward_unit("rms_norm_backward", False),
    inspect=Inspect("backward", "pyrms::rms_norm_backward_kernel (dx and the per-chunk dweight sums); "
                    "weightless = no weight (dx only)", partial(plan_norm_backward, layer_norm=False), {"gemma": False},
                    vectors=BACKWARD_VECTORS),
    twin="pyrms.ops.rms_norm_backward.twin",
    check="backward", operands=backward_operands(False),
    case_options=COMMON_CASE_OPTIONS + ("in_place", "gemma", "grad_dtype", "rows_per_block", "own_workspace",
                                          "grad_output_kind", "rms_bias"),
    random=True, bench="pyrms.ops.rms_norm_backward.bench", model_calls=_model_calls)

SPECS = (RMS_NORM_BACKWARD,)

"""rms_norm_backward's registry entry, and the backward declarations LayerNorm's backward shares."""
from __future__ import annotations

from functools import partial

from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec, Unit
from .plan import NormBackwardPlan, plan_norm_backward


def backward_option_sets(layer_norm: bool):
    """Every option set of a backward (RMSNorm's: gemma, both gradient dtypes, no weight; LayerNorm's: both
    gradient dtypes, with and without a weight)."""
    def option_sets(dt) -> list[dict]:
        if layer_norm:
            return [dict(grad_dtype=d, weight_dtype=w) for d in (None, "float32") for w in (None, "none")]
        return [dict(gemma=g, grad_dtype=d) for g in (False, True) for d in (None, "float32")] + [
            dict(weight_dtype="none")]
    return option_sets


def backward_unit(name: str, layer_norm: bool):
    """The unit of a backward call: one per dtype (every option, both gradient dtypes) and one without a weight;
    ``name``: the op's, for its errors."""

    def unit(dt, hidden, *, grad_dtype=None, weight_dtype=None, **flags) -> Unit:
        if weight_dtype not in (None, "none"):
            raise ValueError(f"{name}'s weight is of the dtype or none, got weight_dtype={weight_dtype!r}")
        p = plan_norm_backward(dt, hidden, layer_norm=layer_norm, grad_dtype=grad_dtype, weight=weight_dtype is None,
                               **flags)
        return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}" + ("" if weight_dtype is None else " weight=none"))
    return unit


def backward_operands(layer_norm: bool):
    """(rows, vectors) of a backward case: grad_input beside grad_output and input (or over grad_output), the
    weight and the parameter gradients summed over rows."""
    def operands(*, in_place=None, bias=True, weight=True, **_):
        params = ("grad_weight",) * weight + ("grad_bias",) * (layer_norm and bias)
        rows = ("grad_output", "input") if in_place else ("grad_output", "input", "grad_input")
        return rows, ("weight",) * weight + params
    return operands


RMS_NORM_BACKWARD = OpSpec(
    name="rms_norm_backward", module="pyrms.ops.rms_norm_backward.op", source="rms_norm_backward.cu",
    torch="pyrms.ops.rms_norm_backward.torch_binding",
    plan=NormBackwardPlan, own_flags=("gemma",), option_sets=backward_option_sets(False),
    unit=backward_unit("rms_norm_backward", False),
    inspect=Inspect("backward", "pyrms::rms_norm_backward_kernel (dx and the per-chunk dweight sums); "
                    "weightless = no weight (dx only)", partial(plan_norm_backward, layer_norm=False), {"gemma": False}),
    twin="pyrms.ops.rms_norm_backward.twin",
    check="backward", operands=backward_operands(False),
    case_options=COMMON_CASE_OPTIONS + ("in_place", "gemma", "grad_dtype", "rows_per_block", "own_workspace"),
    random=True, bench="pyrms.ops.rms_norm_backward.bench")

SPECS = (RMS_NORM_BACKWARD,)

"""The registry declarations both backward specs share: their option sets, compile unit and operands, by whether
the kernel is centered (LayerNorm's, the mean subtracted) or not (RMSNorm's)."""
from __future__ import annotations

from .._spec import Unit, mixed
from .plan import plan_norm_backward


def backward_option_sets(centered: bool):
    """Every option set of a backward (RMSNorm's: gemma, both gradient dtypes, no weight; LayerNorm's: both
    gradient dtypes, with and without a weight; beside bf16/fp16 rows, an fp32 weight with either
    grad_output dtype)."""
    def option_sets(dt) -> list[dict]:
        fp32 = [dict(weight_dtype="float32", grad_output_dtype=o) for o in (None, "float32")] if mixed(dt) else []
        if centered:
            return [dict(grad_dtype=d, weight_dtype=w) for d in (None, "float32") for w in (None, "none")] + fp32
        return [dict(gemma=g, grad_dtype=d) for g in (False, True) for d in (None, "float32")] + [
            dict(weight_dtype="none")] + [dict(o, gemma=g) for o in fp32 for g in (False, True)]
    return option_sets


def backward_unit(name: str, centered: bool):
    """The unit of a backward call: one per dtype and weight kind (every option, both gradient dtypes; an
    fp32 weight with both grad_output dtypes); ``name``: the op's, for its errors."""

    def unit(dt, hidden, *, grad_dtype=None, weight_dtype=None, grad_output_dtype=None, **flags) -> Unit:
        if weight_dtype not in (None, "none", "float32"):
            raise ValueError(f"{name}'s weight is of the dtype, float32 or none, got weight_dtype={weight_dtype!r}")
        p = plan_norm_backward(dt, hidden, centered=centered, grad_dtype=grad_dtype, weight=weight_dtype != "none",
                               weight_dtype=None if weight_dtype == "none" else weight_dtype,
                               grad_output_dtype=grad_output_dtype, **flags)
        return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}" + ("" if p.weight_kind == "same"
                                                                       else f" weight={p.weight_kind}"))
    return unit


def backward_operands(centered: bool):
    """(rows, vectors) of a backward case: grad_input beside grad_output and input (or over grad_output), the
    weight and the parameter gradients summed over rows (grad_bias: LayerNorm's unless bias is False, RMSNorm's
    with rms_bias)."""
    def operands(*, in_place=None, bias=True, weight=True, rms_bias=False, **_):
        params = ("grad_weight",) * weight + ("grad_bias",) * (centered and bias or not centered and rms_bias)
        rows = ("grad_output", "input") if in_place else ("grad_output", "input", "grad_input")
        return rows, ("weight",) * weight + params
    return operands

"""rms_norm_backward's registry entry."""
from __future__ import annotations

from functools import partial

from .._norm_backward.plan import BACKWARD_VECTORS, NormBackwardPlan, plan_norm_backward
from .._norm_backward.spec import backward_operands, backward_option_sets, backward_unit
from .._spec import COMMON_CASE_OPTIONS, Inspect, OpSpec


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
                    "weightless = no weight (dx only)", partial(plan_norm_backward, centered=False), {"gemma": False},
                    vectors=BACKWARD_VECTORS),
    twin="pyrms.ops.rms_norm_backward.twin",
    check="backward", operands=backward_operands(False),
    case_options=COMMON_CASE_OPTIONS + ("in_place", "gemma", "grad_dtype", "rows_per_block", "own_workspace",
                                          "grad_output_kind", "rms_bias"),
    random=True, bench="pyrms.ops.rms_norm_backward.bench", model_calls=_model_calls)

SPECS = (RMS_NORM_BACKWARD,)

"""dynamic_quant's registry entry: one compile unit per (dtype, output dtype), every mode's kernel in it."""
from __future__ import annotations

from ... import dtypes
from .._spec import Inspect, OpSpec, Unit
from .plan import DynamicQuantPlan, plan_dynamic_quant


def _option_sets(dt) -> list[dict]:
    return [dict(out_dtype=q) for q in dtypes.QUANTIZED]


def _unit(dt, hidden, *, out_dtype=None) -> Unit:
    p = plan_dynamic_quant(dt, hidden, out_dtype or dtypes.FLOAT8_E4M3FN)
    return Unit(p.source, p.group, f"{p.source} {dt.name} {p.out_dtype.name}")


def _operands(**_):
    # out: the quantized bytes (offsets in bytes); scale: the scales written (fp32), scale_ub: a device bound
    return ("input", "out"), ("scale", "scale_ub")


DYNAMIC_QUANT = OpSpec(
    name="dynamic_quant", module="pyrms.ops.dynamic_quant.op", source=DynamicQuantPlan.source, plan=DynamicQuantPlan,
    option_sets=_option_sets, unit=_unit,
    # the "seed" grammar: the planned kernel, no variants to pick (per token, the float8_e4m3fn output's)
    inspect=Inspect("seed", "pyrms::dynamic_quant_kernel<T, Q, MODE>, one block per row; per token, the "
                            "float8_e4m3fn output's",
                    lambda dt, hidden: plan_dynamic_quant(dt, hidden, dtypes.FLOAT8_E4M3FN)),
    twin="pyrms.ops.dynamic_quant.twin",
    check="dynamic_quant", operands=_operands,
    case_options=("out_dtype", "mode", "group_size", "ue8m0", "column_major", "scale_ub", "specials", "pdl"))

SPECS = (DYNAMIC_QUANT,)

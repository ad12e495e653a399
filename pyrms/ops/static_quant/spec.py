"""static_quant's registry entry: one compile unit per (dtype, output dtype), whatever the hidden size."""
from __future__ import annotations

from ... import dtypes
from .._spec import Inspect, OpSpec, Unit
from .plan import StaticQuantPlan, plan_static_quant


def _option_sets(dt) -> list[dict]:
    return [dict(out_dtype=q) for q in dtypes.QUANTIZED]


def _unit(dt, hidden, *, out_dtype=None) -> Unit:
    p = plan_static_quant(dt, hidden, out_dtype or dtypes.FLOAT8_E4M3FN)
    return Unit(p.source, p.group, f"{p.source} {dt.name} {p.out_dtype.name}")


def _operands(**_):
    # out: the quantized bytes (offsets in bytes); scale: a device scale (one fp32), where a case has one
    return ("input", "out"), ("scale",)


STATIC_QUANT = OpSpec(
    name="static_quant", module="pyrms.ops.static_quant.op", source=StaticQuantPlan.source, plan=StaticQuantPlan,
    option_sets=_option_sets, unit=_unit,
    # the "seed" grammar: the planned kernel, no variants to pick (the float8_e4m3fn output's)
    inspect=Inspect("seed", "pyrms::static_quant_kernel<T, Q>, one block per row; the float8_e4m3fn output's",
                    lambda dt, hidden: plan_static_quant(dt, hidden, dtypes.FLOAT8_E4M3FN)),
    twin="pyrms.ops.static_quant.twin",
    check="static_quant", operands=_operands, case_options=("out_dtype", "device_scale", "specials", "pdl"))

SPECS = (STATIC_QUANT,)

"""The seed kernel's registry entry: compiled per hidden size (a template argument)."""
from __future__ import annotations

from .._spec import Inspect, OpSpec, Unit
from .op import SeedPlan, plan_seed

# The seed kernel's hidden sizes to precompile: the demo's default.
SEED_HIDDENS = (5120,)


def _unit(dt, hidden) -> Unit:
    s = plan_seed(dt, hidden)
    return Unit(s.source, (s.expression,), f"{s.source} {dt.name} hidden {hidden}")


def _operands(*, in_place=None, weight=True, **_):
    return ("input",) if in_place else ("input", "out"), ("weight",) * weight


SEED = OpSpec(
    name="seed_rms_norm", module="pyrms.ops.seed.op", source="seed_rms_norm.cu", plan=SeedPlan, own_flags=(),
    option_sets=lambda dt: [{}], unit=_unit,
    inspect=Inspect("seed", "transformer::rms_norm_kernel with VEC = gcd(16 / itemsize, hidden), BLOCK = hidden / VEC",
                    lambda dt, hidden: plan_seed(dt, hidden)),
    twin="pyrms.ops.seed.twin",
    check="seed", operands=_operands, case_options=("epsilon",), hiddens=SEED_HIDDENS,
    bench="pyrms.ops.seed.bench")

SPECS = (SEED,)

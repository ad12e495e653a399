"""qk_norm_rope's registry entry: one compile unit per (dtype, gemma, is_neox), every head_dim's packed shape."""
from __future__ import annotations

from .._spec import OpSpec, Unit
from .plan import DTYPES, QkNormRopePlan, plan_qk_norm_rope


def _option_sets(dt) -> list[dict]:
    return QK_NORM_ROPE.flag_sets() if dt in DTYPES else []


def _unit(dt, head_dim, *, gemma=False, is_neox=False) -> Unit:
    p = plan_qk_norm_rope(dt, head_dim, gemma=gemma, is_neox=is_neox)
    label = "".join(f" {name}" for name in p.FLAGS if getattr(p, name))
    return Unit(p.source, p.group, f"{p.source} {dt.name}{label}")


def _operands(**_):
    # qkv: the fused QKV rows (q and k heads rewritten in place); the weights, cache and positions beside them
    return ("qkv",), ("q_weight", "k_weight", "cos_sin_cache", "positions")


QK_NORM_ROPE = OpSpec(
    name="qk_norm_rope", module="pyrms.ops.qk_norm_rope.op", source=QkNormRopePlan.source, plan=QkNormRopePlan,
    option_sets=_option_sets, unit=_unit, inspect=None, hiddens=(64, 128, 256),
    twin="pyrms.ops.qk_norm_rope.twin",
    check="qk_norm_rope", operands=_operands, case_options=("gemma", "is_neox", "rotary_dim", "epsilon", "pdl"))

SPECS = (QK_NORM_ROPE,)

"""qk_norm_rope's registry entry: one compile unit per (dtype, gemma, is_neox, kv_cache), every head_dim's packed
shape and with kv_cache both cache dtypes (so a unit does not depend on head_dim or the cache's dtype; a head too
long to pack is refused at the call)."""
from __future__ import annotations

from .._spec import Inspect, OpSpec, Unit, row_labels
from .plan import QkNormRopePlan, plan_qk_norm_rope


def _option_sets(dt) -> list[dict]:
    return QK_NORM_ROPE.flag_sets()


def _unit(dt, head_dim, *, gemma=False, is_neox=False, kv_cache=False) -> Unit:
    p = QkNormRopePlan(dt, head_dim, 0, 0, gemma, is_neox, kv_cache)  # the group only: every packed shape
    label, _ = row_labels(dt, dict(gemma=gemma, is_neox=is_neox, kv_cache=kv_cache), None, None)
    return Unit(p.source, p.group, f"{p.source} {dt.name}{label}")


def _operands(**_):
    # qkv: the fused QKV rows (q and k heads rewritten in place); the weights, cos/sin cache and positions beside
    # them, and a case with kv_cache's paged caches and slot mapping
    return ("qkv",), ("q_weight", "k_weight", "cos_sin_cache", "positions", "key_cache", "value_cache", "slot_mapping")


QK_NORM_ROPE = OpSpec(
    name="qk_norm_rope", module="pyrms.ops.qk_norm_rope.op", source=QkNormRopePlan.source, plan=QkNormRopePlan,
    option_sets=_option_sets, unit=_unit,
    # the "seed" grammar: the planned kernel for heads of `hidden` (head_dim) elements, NeoX rotation, no cache
    inspect=Inspect("seed", "pyrms::qk_norm_rope_kernel, the planned packed shape for heads of hidden (head_dim) "
                            "elements, NeoX rotation, no KV cache", plan_qk_norm_rope),
    twin="pyrms.ops.qk_norm_rope.twin", torch="pyrms.ops.qk_norm_rope.torch_binding",
    bench="pyrms.ops.qk_norm_rope.bench",
    check="qk_norm_rope", operands=_operands,
    case_options=("gemma", "is_neox", "rotary_dim", "epsilon", "specials", "pdl", "kv_cache", "kv_cache_dtype",
                  "cache_layout", "device_scale"))

SPECS = (QK_NORM_ROPE,)

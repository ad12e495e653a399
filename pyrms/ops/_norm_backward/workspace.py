"""``pyrms.backward_workspace_bytes``: the workspace a backward launch needs, for callers that pass their own.
Its ``layer_norm=`` keyword is the public name of the plan's ``centered`` (the mean subtracted)."""
from __future__ import annotations

from .. import _operands as check
from . import plan as bwd_plan
from .prepared import rows_per_block_arg


def backward_workspace_bytes(num_tokens: int, hidden_size: int, *, layer_norm: bool = False,
                             rows_per_block: int | None = None, weight: bool = True, grad_bias: bool | None = None) -> int:
    """Bytes of ``workspace=`` that one backward launch of this shape needs (any dtype), with the
    planned launch shape or the given ``rows_per_block``; ``layer_norm=True``: LayerNorm's backward, else RMSNorm's.

    ``weight=False``: a backward without weight (``weight=None``), which sums no weight gradient: 0
    bytes for RMSNorm, and for LayerNorm the grad_bias sums unless ``grad_bias=False`` (then 0 too).
    With a weight, LayerNorm's workspace holds both sums whether grad_bias is asked for or not.
    ``grad_bias=True`` for RMSNorm: a backward that sums a bias's gradient too (RMSNorm with a bias)."""
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    p = bwd_plan.plan_norm_backward("float32", hidden, centered=check.flag("layer_norm", layer_norm),
                                   weight=check.flag("weight", weight),
                                   grad_bias=None if grad_bias is None else check.flag("grad_bias", grad_bias))
    return p.workspace_bytes(num_tokens, rows_per_block_arg(rows_per_block, p))


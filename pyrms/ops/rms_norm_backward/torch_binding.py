"""rms_norm_backward for PyTorch: the custom op ``torch.ops.pyrms.rms_norm_backward`` (fake implementation) and
its eager launch on torch tensors (on the norm backward's, pyrms/ops/_norm_backward/torch_launch.py). The
forward's autograd (its binding) calls them: the custom op under torch.compile and tracing, the launch eagerly.
No user function of its own in pyrms.torch.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``), and the
bindings of the forwards whose backward it is.

    torch.ops.pyrms.rms_norm_backward(grad_out, x, weight?, eps, gemma) -> (grad_input, grad_weight)

grad_weight is an empty tensor without a weight (a custom op's tensor outputs cannot be None); autograd
then gets None for it. No ``from __future__ import annotations`` here: torch infers the op's schema from the
annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import check_backward_meta, empty_rows_like, parameter_grad_like
from .._norm_backward.torch_launch import norm_backward_launch

__all__ = []


def launch(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
           gemma: bool, rstd: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight) of the RMSNorm forward; grad_weight summed over all rows in a fixed order,
    in weight's dtype; empty without a weight (nothing summed then: one launch, no workspace). A weight of
    another dtype than x is read as float32 and its gradient summed and written in float32 (then
    converted to the weight's dtype where that is not float32). A weight per head ([heads, head_dim] beside x
    [..., heads, head_dim]): each head's rows are a backward of their own over the token rows (one call per
    head, each head's weight gradient summed over its rows as a [head_dim] weight's is). rstd: the forward's
    saved inv_rms per row (float32 [rows], the forward's eager autograd), read instead of recomputed: the same bits."""
    return norm_backward_launch(grad_out, x, weight, eps, gemma=gemma, rstd=rstd)[:2]


@torch.library.custom_op("pyrms::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                         gemma: bool) -> tuple[Tensor, Tensor]:
    return launch(grad_out, x, weight, eps, gemma)


@rms_norm_backward_op.register_fake
def _(grad_out, x, weight, eps, gemma):
    check_backward_meta(grad_out, x, weight, per_head=True)
    return empty_rows_like(x), parameter_grad_like(x, weight is not None, None if weight is None else weight.dtype,
                                                   None if weight is None else tuple(weight.shape))

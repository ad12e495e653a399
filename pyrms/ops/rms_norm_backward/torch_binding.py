"""rms_norm_backward for PyTorch: the custom op ``torch.ops.pyrms.rms_norm_backward`` (fake implementation) and
its eager launch on torch tensors. The forward's autograd (its binding) calls them: the
custom op under torch.compile and tracing, the launch eagerly. No user function of its own in pyrms.torch.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``), and the forward's
binding.

    torch.ops.pyrms.rms_norm_backward(grad_out, x, weight?, eps, gemma) -> (grad_input, grad_weight)

grad_weight is an empty tensor without a weight (a custom op's tensor outputs cannot be None); autograd
then gets None for it. No ``from __future__ import annotations`` here: torch infers the op's schema from the
annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import (as_float32, check_backward_meta, check_device, current_stream, empty_rows_like, mixed,
                              parameter_grad_like, per_head, rows_of)
from .op import rms_norm_backward as _rms_norm_backward

__all__ = []


def launch(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
           gemma: bool, rstd: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight) of the RMSNorm forward; grad_weight summed over all rows in a fixed order,
    in weight's dtype; empty without a weight (nothing summed then: one launch, no workspace). A weight of
    another dtype than x is read as float32 and its gradient summed and written in float32 (then
    converted to the weight's dtype where that is not float32). A weight per head ([heads, head_dim] beside x
    [..., heads, head_dim]): each head's rows are a backward of their own over the token rows (one call per
    head, each head's weight gradient summed over its rows as a [head_dim] weight's is). rstd: the forward's
    saved inv_rms per row (float32 [rows], rms_norm's eager autograd), read instead of recomputed: the same bits."""
    dtype = check_backward_meta(grad_out, x, weight, per_head=True)
    heads = weight.shape[0] if per_head(weight) else 1
    device = check_device({"x": x, "grad_out": grad_out, "weight": weight})
    mix = mixed(x, weight)
    grad_input = empty_rows_like(x)
    grad_weight = parameter_grad_like(x, weight is not None, torch.float32 if mix else None,
                                      None if weight is None else tuple(weight.shape))
    numel = x.numel()
    if numel:
        hidden = x.shape[-1]
        if per_head(weight):  # token rows of all heads: head h's row is columns [h * hidden, (h + 1) * hidden)
            x, grad_out = x.reshape(-1, heads * hidden), grad_out.reshape(-1, heads * hidden)
        (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)  # autograd's grads may be broadcast views
        w = as_float32(weight) if mix else weight
        two_byte = mix and dtype != "float32"  # fp32 rows: the weight, grad_out and gradients all fp32 too
        for h in range(heads):
            _rms_norm_backward(
                _at(grad_input, h * hidden), None if weight is None else _at(grad_weight, h * hidden),
                _at(grad_out, h * hidden), _at(x, h * hidden), None if w is None else _at(w, h * hidden), eps,
                numel // (heads * hidden), hidden, dtype=dtype, grad_output_stride=g_stride, input_stride=x_stride,
                grad_input_stride=heads * hidden, gemma=gemma, stream=current_stream(device),
                weight_dtype="float32" if two_byte else None,
                grad_output_dtype="float32" if two_byte and grad_out.dtype == torch.float32 else None,
                rstd=None if rstd is None else rstd.data_ptr())
    else:
        grad_weight.zero_()
    return grad_input, grad_weight if not mix else grad_weight.to(weight.dtype)


def _at(t: torch.Tensor, offset: int) -> int:
    """The device address of element ``offset`` of t's storage view (t's first element plus offset)."""
    return t.data_ptr() + offset * t.element_size()


@torch.library.custom_op("pyrms::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                         gemma: bool) -> tuple[Tensor, Tensor]:
    return launch(grad_out, x, weight, eps, gemma)


@rms_norm_backward_op.register_fake
def _(grad_out, x, weight, eps, gemma):
    check_backward_meta(grad_out, x, weight, per_head=True)
    return empty_rows_like(x), parameter_grad_like(x, weight is not None, None if weight is None else weight.dtype,
                                                   None if weight is None else tuple(weight.shape))

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

from ...torch._layout import (check_meta, current_stream, empty_rows_like, operands, parameter_grad_like, ptr,
                              rows_of)
from .op import rms_norm_backward as _rms_norm_backward

__all__ = []


def launch(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
           gemma: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight) of the RMSNorm forward; grad_weight summed over all rows in a fixed order, in
    weight's dtype; empty without a weight (nothing summed then: one launch, no workspace)."""
    dtype, device = operands(x, {"weight": weight}, {"grad_out": grad_out})
    grad_input, grad_weight = empty_rows_like(x), parameter_grad_like(x, weight is not None)
    numel = x.numel()
    if not numel:
        return grad_input, grad_weight.zero_()
    hidden = x.shape[-1]
    (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)  # autograd's grads may be broadcast views
    _rms_norm_backward(grad_input.data_ptr(), None if weight is None else grad_weight.data_ptr(), grad_out.data_ptr(),
                       x.data_ptr(), ptr(weight), eps, numel // hidden, hidden, dtype=dtype,
                       grad_output_stride=g_stride, input_stride=x_stride, grad_input_stride=hidden, gemma=gemma,
                       stream=current_stream(device))
    return grad_input, grad_weight


@torch.library.custom_op("pyrms::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                         gemma: bool) -> tuple[Tensor, Tensor]:
    return launch(grad_out, x, weight, eps, gemma)


@rms_norm_backward_op.register_fake
def _(grad_out, x, weight, eps, gemma):
    check_meta(x, {"weight": weight}, {"grad_out": grad_out})
    return empty_rows_like(x), parameter_grad_like(x, weight is not None)

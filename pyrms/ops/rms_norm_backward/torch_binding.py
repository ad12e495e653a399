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

from ... import driver
from ...torch._layout import (DTYPE_NAMES, as_float32, check_backward_meta, check_device, current_stream,
                              empty_rows_like, mixed, parameter_grad_like, per_head, rows_of)
from .op import rms_norm_backward as _rms_norm_backward
from .prepared import _prepared

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
    # The hot path (eager autograd calls this once per norm per step): each check reads one torch attribute;
    # anything it turns down (a weight per head, or operands to refuse) goes through the checks that name it.
    try:
        dtype = DTYPE_NAMES.get(x.dtype)
        device = x.get_device()
        hidden = x.shape[-1]
        mix = weight is not None and weight.dtype is not x.dtype
        ok = (dtype is not None and device >= 0 and device == driver.selected_device().ordinal
              and grad_out.shape == x.shape and grad_out.get_device() == device
              and (grad_out.dtype is x.dtype or (mix and grad_out.dtype is torch.float32))
              and (weight is None or (weight.shape == (hidden,) and weight.get_device() == device
                                      and weight.is_contiguous() and weight.dtype in DTYPE_NAMES)))
    except (AttributeError, IndexError):  # not tensors, or a 0-d x
        ok = False
    if not ok:
        dtype = check_backward_meta(grad_out, x, weight, per_head=True)
        device = check_device({"x": x, "grad_out": grad_out, "weight": weight})
        hidden, mix = x.shape[-1], mixed(x, weight)
    heads = weight.shape[0] if per_head(weight) else 1
    grad_input = empty_rows_like(x)
    grad_weight = parameter_grad_like(x, weight is not None, torch.float32 if mix else None,
                                      None if weight is None else tuple(weight.shape))
    numel = x.numel()
    if not numel:
        return grad_input, grad_weight.zero_().to(weight.dtype) if mix else grad_weight.zero_()
    if heads > 1:  # token rows of all heads: head h's row is columns [h * hidden, (h + 1) * hidden)
        x, grad_out = x.reshape(-1, heads * hidden), grad_out.reshape(-1, heads * hidden)
    (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)  # autograd's grads may be broadcast views
    w = as_float32(weight) if mix else weight
    two_byte = mix and dtype != "float32"  # fp32 rows: the weight, grad_out and gradients all fp32 too
    w_kind = "float32" if two_byte else None
    go_kind = "float32" if two_byte and grad_out.dtype == torch.float32 else None
    rows, stream = numel // (heads * hidden), current_stream(device)
    gi_stride = heads * hidden
    prepared = _prepared.get(False, dtype, None, hidden, gi_stride, g_stride, x_stride, gemma, None, weight is None,
                             False, True, w_kind, go_kind)
    item, g_item, w_item = x.element_size(), grad_out.element_size(), 0 if w is None else w.element_size()
    gi, go, xp, wp = grad_input.data_ptr(), grad_out.data_ptr(), x.data_ptr(), 0 if w is None else w.data_ptr()
    gw, saved = (0 if weight is None else grad_weight.data_ptr()), (0 if rstd is None else rstd.data_ptr())
    for h in range(heads):
        # Each head's operands start h * hidden elements into its rows (its weight row: into the weight).
        a_gi, a_go, a_x = gi + h * hidden * item, go + h * hidden * g_item, xp + h * hidden * item
        a_w = wp + h * hidden * w_item if wp else 0
        a_gw = gw + h * hidden * grad_weight.element_size() if gw else 0
        if prepared is not None:
            # The workspace from torch's caching allocator, on the stream the kernels run on: freed when this
            # call returns, reused by torch only by work queued after them on that stream.
            nbytes = prepared.workspace_bytes(a_gi, a_go, a_x, a_w, rows)
            ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
            if prepared(a_gi, a_go, a_x, a_w, () if weight is None else (a_gw,), float(eps), rows, stream,
                        None if ws is None else ws.data_ptr(), saved):
                continue
        # The general path: it raises the error that names what the prepared launch turned down.
        _rms_norm_backward(a_gi, None if weight is None else a_gw, a_go, a_x, None if w is None else a_w, eps, rows,
                           hidden, dtype=dtype, grad_output_stride=g_stride, input_stride=x_stride,
                           grad_input_stride=gi_stride, gemma=gemma, stream=stream, weight_dtype=w_kind,
                           grad_output_dtype=go_kind, rstd=None if rstd is None else saved)
    return grad_input, grad_weight if not mix else grad_weight.to(weight.dtype)


@torch.library.custom_op("pyrms::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                         gemma: bool) -> tuple[Tensor, Tensor]:
    return launch(grad_out, x, weight, eps, gemma)


@rms_norm_backward_op.register_fake
def _(grad_out, x, weight, eps, gemma):
    check_backward_meta(grad_out, x, weight, per_head=True)
    return empty_rows_like(x), parameter_grad_like(x, weight is not None, None if weight is None else weight.dtype,
                                                   None if weight is None else tuple(weight.shape))

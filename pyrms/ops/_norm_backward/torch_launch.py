"""The eager launch of the norm backward on torch tensors, RMSNorm's or LayerNorm's (centered) and RMSNorm's with a
bias: the PyTorch bindings' backward, one path for the three. Its workspace comes from torch's caching allocator on
torch's current stream.

Imports torch: only the bindings (``OpSpec.torch`` modules) import this module.
"""
import torch

from ... import driver
from ...torch._layout import (DTYPE_NAMES, as_float32, check_backward_meta, check_device, current_stream,
                              empty_rows_like, mixed, parameter_grad_like, per_head, rows_of,
                              vector_weight)
from .prepared import _prepared, launch_prepared, norm_backward


def norm_backward_launch(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float, *,
                         centered: bool = False, gemma: bool = False, grad_bias: bool = False,
                         rstd: torch.Tensor | None = None,
                         mean: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight, grad_bias) of RMSNorm, or LayerNorm where ``centered``, grad_bias the sum of
    grad_out over rows where asked for (LayerNorm's bias, or RMSNorm's with a bias), else empty, like grad_weight
    without a weight. A weight per head: RMSNorm's alone, without a bias. rstd (and LayerNorm's mean): the
    forward's saved statistics, float32 [rows], read instead of recomputed; None: recompute."""
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
              and vector_weight(weight, hidden, device))
    except (AttributeError, IndexError):  # not tensors, or a 0-d x
        ok = False
    if not ok:
        dtype = check_backward_meta(grad_out, x, weight, per_head=not (centered or grad_bias))
        device = check_device({"x": x, "grad_out": grad_out, "weight": weight})
        hidden, mix = x.shape[-1], mixed(x, weight)
    heads = weight.shape[0] if per_head(weight) else 1
    grad_input = empty_rows_like(x)
    grads = (parameter_grad_like(x, weight is not None, torch.float32 if mix else None,
                                 None if weight is None else tuple(weight.shape)),
             parameter_grad_like(x, grad_bias, torch.float32 if mix else None))
    numel = x.numel()
    if numel:
        _launch(grad_input, grads, grad_out, x, weight, eps, centered, gemma, grad_bias, rstd, mean, dtype, device,
                hidden, heads, mix)
    else:
        for g in grads:
            g.zero_()
    return (grad_input, *(g.to(weight.dtype) if mix else g for g in grads))


def _launch(grad_input, grads, grad_out, x, weight, eps, centered, gemma, grad_bias, rstd, mean, dtype, device, hidden,
            heads, mix) -> None:
    """norm_backward_launch's kernels, into its outputs, on torch's current stream: one backward per head."""
    if heads > 1:  # token rows of all heads: head h's row is columns [h * hidden, (h + 1) * hidden)
        x, grad_out = x.reshape(-1, heads * hidden), grad_out.reshape(-1, heads * hidden)
    (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)  # autograd's grads may be broadcast views
    w = as_float32(weight) if mix else weight
    two_byte = mix and dtype != "float32"  # fp32 rows: the weight, grad_out and gradients all fp32 too
    w_kind = "float32" if two_byte else None
    go_kind = "float32" if two_byte and grad_out.dtype == torch.float32 else None
    rows, stream, gi_stride = x.numel() // (heads * hidden), current_stream(device), heads * hidden
    prepared = _prepared.get(centered, dtype, None, hidden, gi_stride, g_stride, x_stride, gemma, None,
                             weight is None, grad_bias, True, w_kind, go_kind)
    item, g_item, p_item = x.element_size(), grad_out.element_size(), grads[0].element_size()
    gi, go, xp, wp = grad_input.data_ptr(), grad_out.data_ptr(), x.data_ptr(), 0 if w is None else w.data_ptr()
    gw, gb = (0 if weight is None else grads[0].data_ptr()), (grads[1].data_ptr() if grad_bias else 0)
    saved = 0 if rstd is None else rstd.data_ptr()
    saved_mean = 0 if mean is None else mean.data_ptr()
    for h in range(heads):
        # Each head's operands start h * hidden elements into its rows (its weight row: into the weight).
        a_gi, a_go, a_x = gi + h * hidden * item, go + h * hidden * g_item, xp + h * hidden * item
        a_w = wp + h * hidden * w.element_size() if wp else 0
        a_gw = gw + h * hidden * p_item if gw else 0
        params = (*((a_gw,) if gw else ()), *((gb,) if gb else ()))  # in the workspace's plane order
        if prepared is not None:
            # The workspace from torch's caching allocator, on the stream the kernels run on: freed when this
            # call returns, reused by torch only by work queued after them on that stream.
            nbytes = prepared.workspace_bytes(a_gi, a_go, a_x, a_w, rows, saved=bool(saved))
            ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
            if launch_prepared(prepared, (a_gi, a_go, a_x, a_w, params, float(eps), rows, stream,
                                          None if ws is None else ws.data_ptr(), saved, saved_mean)):
                continue
        # The general path: it raises the error that names what the prepared launch turned down.
        norm_backward(centered=centered, grad_input=a_gi, grad_weight=a_gw or None, grad_bias=gb or None,
                      grad_output=a_go, input=a_x, weight=a_w or None, epsilon=eps, num_tokens=rows,
                      hidden_size=hidden, dtype=dtype, grad_output_stride=g_stride, input_stride=x_stride,
                      grad_input_stride=gi_stride, gemma=gemma, grad_weight_dtype=None, workspace=None,
                      rows_per_block=None, stream=stream, pdl=True, weight_dtype=w_kind, grad_output_dtype=go_kind,
                      rstd=saved or None, mean=saved_mean or None)

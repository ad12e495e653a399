"""The launches on torch tensors, without autograd: pyrms's raw-pointer API (its fast path) called
with torch's pointers, strides and current stream. The custom ops of _ops.py run these, and so do
pyrms.torch's functions when they need no custom op (functional.py says when).

Layouts: ``x`` is [..., hidden]; its rows are addressed with one row stride when its leading
dimensions nest (contiguous tensors, row slices such as ``big[..., :hidden]``); rms_norm reads other
views of up to three leading dimensions where they lie (pyrms.rms_norm's N-D kernel), and every op
reads from a contiguous copy otherwise. Outputs are new tensors whose rows lie ``hidden`` apart (contiguous).
The in-place op (fused_add_rms_norm) cannot copy, so it raises ValueError for such layouts.
``weight=None`` (and LayerNorm's bias) means none: the kernels without weight. The backward
launches return an empty tensor in the place of a gradient they do not compute (a custom op's
outputs cannot be None).
"""
from __future__ import annotations

import torch

from .. import driver
from .. import fused_add_rms_norm as _fused_add_rms_norm
from .. import layer_norm as _layer_norm
from .. import layer_norm_backward as _layer_norm_backward
from .. import rms_norm as _rms_norm
from .. import rms_norm_backward as _rms_norm_backward
from ..ops import _views
from ..ops.rms_norm.op import prepared as _prepared_rms_norm
from ._layout import (DTYPE_NAMES, check_device, check_meta, current_stream, empty_rows_like, in_place_stride,
                      rows_of, row_stride)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool,
             round_once: bool) -> torch.Tensor:
    """RMSNorm of x's rows into a new tensor (see pyrms.torch.rms_norm); weight None: no weight."""
    # The hot path: every check reads one torch attribute, and any failure goes to _explain for its message.
    # get_device() is -1 on the CPU: two equal indices >= 0 mean two tensors on one GPU (and no driver is
    # asked about a CPU tensor, which _explain refuses by name).
    try:
        dtype = DTYPE_NAMES.get(x.dtype)
        ok = (dtype is not None and (device := x.get_device()) >= 0 and device == driver.selected_device().ordinal)
        hidden = x.shape[-1]
        ok = ok and (weight is None or (weight.dtype is x.dtype and device == weight.get_device()
                                        and weight.shape == (hidden,) and weight.is_contiguous()))
    except (AttributeError, IndexError):  # not a tensor, or a 0-d one
        ok = False
    if not ok:
        _explain(x, weight)
    if x.is_contiguous():
        out, stride = torch.empty_like(x), hidden
    else:
        stride = row_stride(x)
        out = empty_rows_like(x)
        if stride is None:
            if _nd_view(x):
                return _rms_norm_view(out, x, weight, eps, gemma, round_once, device)
            x, stride = x.contiguous(), hidden
    numel = x.numel()
    if numel:
        weightless = weight is None  # its own kernel (pyrms.rms_norm's weight_dtype "none"), a null weight
        args = (out.data_ptr(), x.data_ptr(), 0 if weightless else weight.data_ptr(), float(eps), numel // hidden,
                current_stream(device))
        launch = _prepared_rms_norm(dtype, hidden, stride, hidden, gemma, round_once, True,
                                    "none" if weightless else None)
        if launch is None or not launch(*args):  # the general path says what is wrong
            _rms_norm(args[0], args[1], None if weightless else args[2], args[3], args[4], hidden, dtype=dtype,
                      input_stride=stride, out_stride=hidden, stream=args[5], gemma=gemma, round_once=round_once)
    return out


def _nd_view(x: torch.Tensor) -> bool:
    """Whether pyrms's N-D kernel addresses x's rows where they lie: the hidden dimension contiguous and
    the leading ones collapsing to at most three (pyrms.ops._views)."""
    if x.stride(-1) != 1:
        return False
    try:
        _views.joint_lead(tuple(x.shape[:-1]), {"x": x.stride()[:-1]}, False, x.shape[-1])
    except ValueError:
        return False
    return True


def _rms_norm_view(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool,
                   round_once: bool, device: int) -> torch.Tensor:
    """rms_norm of a view whose leading dimensions no one stride addresses (QK-norm's heads of a fused
    QKV projection, a transposed [batch, heads, seq, head_dim]): pyrms.rms_norm's N-D kernel reads x
    where it lies, instead of from a contiguous copy (a second pass over x and an allocation)."""
    if x.numel():
        _rms_norm(out, x, weight, float(eps), stream=current_stream(device), gemma=gemma, round_once=round_once)
    return out


def _explain(x, weight) -> None:
    """Raise the error that names why rms_norm's hot path turned these operands down (it knows only
    that it did)."""
    check_meta(x, {"weight": weight})
    check_device({"x": x, "weight": weight})
    raise AssertionError("unreachable: the operands passed every check")  # keeps a logic slip from launching


# fused_add_rms_norm's rows that may be float32 beside x of another dtype: an fp32 residual stream.
FUSED_ADD_FLOAT32_ROWS = ("residual",)


def _operands(x: torch.Tensor, vectors: dict, rows: dict | None = None, float32_rows: tuple = ()) -> tuple[str, int]:
    """(pyrms dtype name, device index) of operands that pass every check; the error otherwise."""
    name = check_meta(x, vectors, rows, float32_rows)
    return name, check_device({"x": x, **(rows or {}), **vectors})


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool,
                       round_once: bool, sum_precision: str | None = None) -> None:
    """In place: residual <- x + residual, then x <- rms_norm(residual) (see pyrms.torch.fused_add_rms_norm)."""
    dtype, device = _operands(x, {"weight": weight}, {"residual": residual}, FUSED_ADD_FLOAT32_ROWS)
    x_stride, residual_stride = in_place_stride("x", x), in_place_stride("residual", residual)
    numel = x.numel()
    if numel:
        hidden = x.shape[-1]
        _fused_add_rms_norm(x.data_ptr(), residual.data_ptr(), weight.data_ptr(), eps, numel // hidden, hidden,
                            dtype=dtype, input_stride=x_stride, residual_stride=residual_stride,
                            stream=current_stream(device), gemma=gemma, round_once=round_once,
                            sum_precision=sum_precision, residual_dtype=DTYPE_NAMES[residual.dtype])


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm of x's rows into a new tensor (see pyrms.torch.layer_norm); weight/bias None: none."""
    dtype, device = _operands(x, {"weight": weight, "bias": bias})
    x, stride = rows_of(x)
    out = empty_rows_like(x)
    numel = x.numel()
    if numel:
        hidden = x.shape[-1]
        _layer_norm(out.data_ptr(), x.data_ptr(), _ptr(weight), _ptr(bias), eps, numel // hidden, hidden, dtype=dtype,
                    input_stride=stride, out_stride=hidden, stream=current_stream(device))
    return out


def parameter_grad_like(x: torch.Tensor, wanted: bool) -> torch.Tensor:
    """A parameter gradient's output: [hidden] of x's dtype, or empty where it is not computed. The
    fake implementations call this too, so that fake and real outputs agree."""
    return x.new_empty(x.shape[-1] if wanted else 0)


def rms_norm_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                      gemma: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight) of rms_norm; grad_weight summed over all rows in a fixed order, in
    weight's dtype; empty without a weight (nothing summed then: one launch, no workspace)."""
    dtype, device = _operands(x, {"weight": weight}, {"grad_out": grad_out})
    grad_input, grad_weight = empty_rows_like(x), parameter_grad_like(x, weight is not None)
    numel = x.numel()
    if not numel:
        return grad_input, grad_weight.zero_()
    hidden = x.shape[-1]
    (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)  # autograd's grads may be broadcast views
    _rms_norm_backward(grad_input.data_ptr(), None if weight is None else grad_weight.data_ptr(), grad_out.data_ptr(),
                       x.data_ptr(), _ptr(weight), eps, numel // hidden, hidden, dtype=dtype,
                       grad_output_stride=g_stride, input_stride=x_stride, grad_input_stride=hidden, gemma=gemma,
                       stream=current_stream(device))
    return grad_input, grad_weight


def layer_norm_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                        has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight, grad_bias) of layer_norm, the sums over rows in a fixed order; grad_weight
    empty without a weight, grad_bias (the sum of grad_out over rows) empty unless has_bias. Without
    either, nothing is summed: one launch, no workspace."""
    dtype, device = _operands(x, {"weight": weight}, {"grad_out": grad_out})
    grad_input = empty_rows_like(x)
    grad_weight, grad_bias = parameter_grad_like(x, weight is not None), parameter_grad_like(x, has_bias)
    numel = x.numel()
    if not numel:
        return grad_input, grad_weight.zero_(), grad_bias.zero_()
    hidden = x.shape[-1]
    (x, x_stride), (grad_out, g_stride) = rows_of(x), rows_of(grad_out)
    _layer_norm_backward(grad_input.data_ptr(), None if weight is None else grad_weight.data_ptr(),
                         grad_bias.data_ptr() if has_bias else None, grad_out.data_ptr(), x.data_ptr(), _ptr(weight),
                         eps, numel // hidden, hidden, dtype=dtype, grad_output_stride=g_stride, input_stride=x_stride,
                         grad_input_stride=hidden, stream=current_stream(device))
    return grad_input, grad_weight, grad_bias

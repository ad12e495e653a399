"""layer_norm and layer_norm_backward for PyTorch: the custom ops ``torch.ops.pyrms.layer_norm`` (fake
implementation, autograd through the backward op) and ``torch.ops.pyrms.layer_norm_backward`` (fake
implementation), their eager launches on torch tensors, the ``torch.autograd.Function`` that eager autograd goes
through, the user function ``pyrms.torch.layer_norm`` and the module over it, ``LayerNorm``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.layer_norm(x, weight?, bias?, eps, rms=False) -> Tensor
    torch.ops.pyrms.layer_norm_backward(grad_out, x, weight?, eps, has_bias, rms=False) -> (grad_input, grad_weight, grad_bias)

rms: RMSNorm with a bias (``pyrms.layer_norm``'s rms=True, its backward RMSNorm's with grad_bias),
where RMSNorm's PyTorch function routes a call given a bias.

Layouts: rows one stride apart are read in place, others from a contiguous copy; outputs are new tensors whose
rows lie ``hidden`` apart. The backward op returns an empty tensor for a gradient it does not compute
(grad_weight without a weight, grad_bias without has_bias), since a custom op's tensor outputs cannot be None;
autograd then gets None for them. Routing: pyrms/torch/_routing.py. No ``from __future__ import annotations``
here: torch infers each op's schema from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ...torch._layout import (as_float32, check_backward_meta, check_device, check_meta, current_stream,
                              empty_rows_like, mixed, parameter_grad_like, ptr, rows_of)
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import records as _records
from ...torch.modules import swaps_in
from .._norm_backward.torch_launch import norm_backward_launch
from .op import _prepared as _prepared_layer_norm
from .op import layer_norm as _layer_norm

__all__ = ["layer_norm", "LayerNorm"]


# --- the eager launches ---------------------------------------------------------------------------------


def _check(x, weight, bias, rms: bool = False) -> tuple[str, bool]:
    """check_meta of the forward's operands, and whether the parameters are of another dtype than x (mixed:
    weight and bias then share one dtype, read as float32; a bias alone must be of x's dtype). rms: RMSNorm with a
    bias, which needs one."""
    if rms and bias is None:
        raise ValueError("rms=True is RMSNorm with a bias, and bias is None (without one, the RMSNorm forward with "
                         "round_once=True computes the same)")
    dtype = check_meta(x, {"weight": weight, "bias": bias}, mixed_vectors=("weight", "bias"))
    mix = mixed(x, weight) or mixed(x, bias)
    if mix and (weight is None or (bias is not None and bias.dtype != weight.dtype)):
        raise TypeError(f"weight has dtype {None if weight is None else weight.dtype} and bias {bias.dtype}, x "
                        f"{x.dtype}: the weight and bias share one dtype, x's or another (read as float32); without a "
                        "weight the bias is of x's dtype")
    return dtype, mix


def launch(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
           rms: bool = False) -> torch.Tensor:
    """LayerNorm of x's rows into a new tensor (see pyrms.torch.layer_norm); weight/bias None: none. Parameters
    of another dtype than x are read as float32 and the output is float32. rms: RMSNorm with a bias."""
    return _launch_rows(x, weight, bias, eps, rms, False)[0]


def _launch_rows(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, rms: bool,
                 save: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(out, mean, rstd) of launch; save: each row's statistics also stored, for the backward to read, into new
    float32 [rows] tensors (mean None with rms: RMSNorm's rstd alone); else (out, None, None)."""
    dtype, mix = _check(x, weight, bias, rms)
    device = check_device({"x": x, "weight": weight, "bias": bias})
    x, stride = rows_of(x)
    out = empty_rows_like(x, torch.float32 if mix else None)
    numel = x.numel()
    mean = rstd = None
    if numel:
        hidden = x.shape[-1]
        rows = numel // hidden
        kind = "float32" if mix and dtype != "float32" else None  # fp32 rows: one dtype all through
        if mix:
            weight, bias = as_float32(weight), as_float32(bias)
        if save:
            rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
            mean = None if rms else torch.empty(rows, dtype=torch.float32, device=x.device)
        stream = current_stream(device)
        # The prepared launch, as pyrms.layer_norm's hot path finds it (which statistics pointers do not take);
        # where it declines, the function's general path says why.
        prepared = _prepared_layer_norm.get(dtype, hidden, stride, hidden, bias is not None, True, weight is not None,
                                            kind, kind, rms)
        if prepared is None or not prepared(out.data_ptr(), x.data_ptr(), ptr(weight), ptr(bias), float(eps), rows,
                                            stream, 0 if mean is None else mean.data_ptr(),
                                            0 if rstd is None else rstd.data_ptr()):
            _layer_norm(out.data_ptr(), x.data_ptr(), ptr(weight), ptr(bias), eps, rows, hidden, dtype=dtype,
                        input_stride=stride, out_stride=hidden, stream=stream, weight_dtype=kind, out_dtype=kind,
                        rms=rms, mean=ptr(mean), rstd=ptr(rstd))
    return out, mean, rstd


def _forward_saving_stats(x, weight, bias, eps: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor | None,
                                                                           torch.Tensor | None]:
    """The forward under eager autograd: (out, mean, rstd), the statistics saved where x is a CUDA tensor; else
    launch's output and None (launch names what it refuses)."""
    if not (isinstance(x, torch.Tensor) and x.is_cuda):
        return launch(x, weight, bias, eps, rms), None, None
    return _launch_rows(x, weight, bias, eps, rms, True)


def launch_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                    has_bias: bool, rms: bool = False, mean: torch.Tensor | None = None,
                    rstd: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_input, grad_weight, grad_bias) of layer_norm, the sums over rows in a fixed order; grad_weight
    empty without a weight, grad_bias (the sum of grad_out over rows) empty unless has_bias. Without
    either, nothing is summed: one launch, no workspace. A weight of another dtype than x (the bias's too)
    is read as float32, both gradients summed and written in float32, then converted to its dtype. rms: of
    RMSNorm with a bias (RMSNorm's backward with grad_bias). mean, rstd: the forward's saved statistics
    (_launch_rows'), read instead of recomputed; None: recompute."""
    return norm_backward_launch(grad_out, x, weight, eps, centered=not rms, grad_bias=has_bias, rstd=rstd, mean=mean)


# --- the custom ops -------------------------------------------------------------------------------------


@torch.library.custom_op("pyrms::layer_norm", mutates_args=())
def layer_norm_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float, rms: bool = False) -> Tensor:
    return launch(x, weight, bias, eps, rms)


@layer_norm_op.register_fake
def _(x, weight, bias, eps, rms=False):
    _, mix = _check(x, weight, bias, rms)
    return empty_rows_like(x, torch.float32 if mix else None)


@torch.library.custom_op("pyrms::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                           has_bias: bool, rms: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    return launch_backward(grad_out, x, weight, eps, has_bias, rms)


@layer_norm_backward_op.register_fake
def _(grad_out, x, weight, eps, has_bias, rms=False):
    check_backward_meta(grad_out, x, weight)
    param = None if weight is None else weight.dtype
    return (empty_rows_like(x), parameter_grad_like(x, weight is not None, param), parameter_grad_like(x, has_bias, param))


def _save_layer_norm(ctx, inputs, output):
    x, weight, bias, eps, rms = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.has_bias, ctx.rms = eps, bias is not None, rms


def _layer_norm_grads(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_input, grad_weight, grad_bias = layer_norm_backward_op(grad, x, weight, ctx.eps, ctx.has_bias, ctx.rms)
    return grad_input, None if weight is None else grad_weight, grad_bias if ctx.has_bias else None, None, None


layer_norm_op.register_autograd(_layer_norm_grads, setup_context=_save_layer_norm)


# --- eager autograd: the same backward without the custom op's dispatch ------------------------------


class LayerNormFunction(torch.autograd.Function):
    """layer_norm's autograd for eager calls, which costs the host a fraction of a custom op's dispatch."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms):
        out, mean, rstd = _forward_saving_stats(x, weight, bias, eps, rms)
        # the statistics: the backward reads them instead of recomputing (the same bits, fewer block sums)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.eps, ctx.has_bias, ctx.rms = eps, bias is not None, rms
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        grad_input, grad_weight, grad_bias = launch_backward(grad, x, weight, ctx.eps, ctx.has_bias, ctx.rms, mean,
                                                             rstd)
        return grad_input, None if weight is None else grad_weight, grad_bias if ctx.has_bias else None, None, None


# --- the user function ----------------------------------------------------------------------------------

_LAYER_NORM = torch.ops.pyrms.layer_norm.default


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension: ``(x - mean) / sqrt(var + eps) * weight + bias`` (population
    variance; ``bias=None`` adds nothing, ``weight=None`` multiplies by nothing: with both None,
    ``torch.nn.LayerNorm(elementwise_affine=False)``), statistics and expression in fp32, rounded once.

    Operands, layouts and errors as in every pyrms.torch norm; ``bias`` like ``weight``, of the weight's dtype. Parameters of
    another dtype than x (fp32 master weights beside bf16 activations) are read as float32 and the output is
    float32, the dtypes' promotion (as ``torch.nn.LayerNorm`` gives under autocast, which runs it in fp32);
    their gradients are summed in float32. Differentiable once in x,
    weight and bias (pyrms's backward kernels, the sums over rows in a fixed order; only the gradients
    of the tensors given are computed: with neither weight nor bias, dx alone in one launch).
    """
    return with_bias(x, weight, bias, eps, False)


def with_bias(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
              rms: bool) -> torch.Tensor:
    """layer_norm, or (rms) RMSNorm with a bias: the custom op under torch.compile and tracing, the autograd Function
    where a gradient is recorded, else the launch."""
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _LAYER_NORM(x, weight, bias, float(eps), rms)
    if _records(x, weight, bias):
        return LayerNormFunction.apply(x, weight, bias, eps, rms)
    return launch(x, weight, bias, eps, rms)


# --- the module ------------------------------------------------------------------------------------


@swaps_in
class LayerNorm(nn.Module):
    """``torch.nn.LayerNorm`` over the last dimension through ``pyrms.torch.layer_norm``: the same
    arguments, attributes (``normalized_shape``, ``eps``, ``elementwise_affine``) and state dict
    (``weight`` and ``bias``: ``bias`` not with ``bias=False``, neither with
    ``elementwise_affine=False``). NotImplementedError for a normalized_shape of more than one
    dimension, which pyrms has no kernel for."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype: torch.dtype | None = None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1:
            raise NotImplementedError(f"pyrms normalizes over the last dimension only; normalized_shape={shape}")
        self.normalized_shape = shape
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:  # as torch.nn.LayerNorm: without it, no bias either
            self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if self.elementwise_affine and bias:
            self.bias = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")

    @classmethod
    def from_module(cls, norm: nn.LayerNorm) -> "LayerNorm":
        """A LayerNorm computing what ``norm`` (an ``nn.LayerNorm``) computes, sharing its Parameters."""
        module = cls(norm.normalized_shape, norm.eps, norm.elementwise_affine, norm.bias is not None, device="meta")
        if norm.weight is not None:
            module.weight = norm.weight
        if norm.bias is not None:
            module.bias = norm.bias
        module.train(norm.training)
        return module

    @classmethod
    def taking_over(cls, norm: nn.LayerNorm, swap=None) -> "LayerNorm":
        """The LayerNorm replace_norms puts in ``norm``'s place (``from_module``; the Swap says nothing more)."""
        return cls.from_module(norm)

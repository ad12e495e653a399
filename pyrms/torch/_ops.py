"""pyrms's kernels as torch.library custom ops (namespace ``pyrms``), with fake implementations for
torch.compile, torch.export and FakeTensor tracing, and autograd through pyrms's backward kernels;
and the same autograd as ``torch.autograd.Function``s for eager calls (RmsNormFunction, LayerNormFunction),
which cost the host a fraction of a custom op's dispatch (about 8 against 40 µs per call, measured
on the development machine with the launches stubbed).

    torch.ops.pyrms.rms_norm(x, weight?, eps, gemma, round_once) -> Tensor
    torch.ops.pyrms.rms_norm_backward(grad_out, x, weight?, eps, gemma) -> (grad_input, grad_weight)
    torch.ops.pyrms.fused_add_rms_norm(input, residual, weight, eps, gemma, round_once, sum_precision?) -> ()
        mutates input, residual
    torch.ops.pyrms.layer_norm(x, weight?, bias?, eps) -> Tensor
    torch.ops.pyrms.layer_norm_backward(grad_out, x, weight?, eps, has_bias) -> (grad_input, grad_weight, grad_bias)
    torch.ops.pyrms.rms_norm_quant(x, weight, eps, out_dtype, quant_mode, scale?, scale_tensor?, scale_ub?,
                                   scale_ub_tensor?, group_size?, ue8m0, column_major_scales, tma_aligned_scales,
                                   round_input, norm_out) -> (q, scales, norm_out)
    torch.ops.pyrms.fused_add_rms_norm_quant(x, residual, weight, eps, <the same>) -> (q, scales, norm_out)
        mutates residual

``weight?``: None for a norm without weight (``torch.nn.RMSNorm``/``LayerNorm`` with
``elementwise_affine=False``). A backward op returns an empty tensor for a gradient it does not
compute (grad_weight without a weight, grad_bias without has_bias), since a custom op's tensor
outputs cannot be None; autograd then gets None for them. So do the quantizing ops for the scales
(static) and the norm_out (without norm_out=True); their scale and scale_ub come as a float or a one-element
fp32 tensor (scale_tensor, scale_ub_tensor), at most one of each pair given; their ``quant_mode`` is the
functions' ``mode`` (an argument named ``mode`` collides with torch's auto_functionalized, which calls
mutating custom ops with keyword arguments beside a ``mode`` of its own). They have no autograd formula
(quantized outputs are not differentiable): a backward through their outputs raises torch's RuntimeError
for a custom op without one.

The fake implementations check dtypes and shapes as the kernels do, but not the device: which
device pyrms launches on is known only at run time. No ``from __future__ import annotations`` here:
torch infers each op's schema from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import _kernels as kernels
from . import _quant as quant
from ._layout import check_meta, empty_rows_like


@torch.library.custom_op("pyrms::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float, gemma: bool, round_once: bool) -> Tensor:
    return kernels.rms_norm(x, weight, eps, gemma, round_once)


@rms_norm.register_fake
def _(x, weight, eps, gemma, round_once):
    check_meta(x, {"weight": weight})
    return empty_rows_like(x)


@torch.library.custom_op("pyrms::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                      gemma: bool) -> tuple[Tensor, Tensor]:
    return kernels.rms_norm_backward(grad_out, x, weight, eps, gemma)


@rms_norm_backward.register_fake
def _(grad_out, x, weight, eps, gemma):
    check_meta(x, {"weight": weight}, {"grad_out": grad_out})
    return empty_rows_like(x), kernels.parameter_grad_like(x, weight is not None)


def _save_rms_norm(ctx, inputs, output):
    x, weight, eps, gemma, _ = inputs  # round_once does not apply: the gradient is of the exact function
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.gemma = eps, gemma


def _rms_norm_grads(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_input, grad_weight = rms_norm_backward(grad, x, weight, ctx.eps, ctx.gemma)
    return grad_input, None if weight is None else grad_weight, None, None, None


rms_norm.register_autograd(_rms_norm_grads, setup_context=_save_rms_norm)


@torch.library.custom_op("pyrms::fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm(input: Tensor, residual: Tensor, weight: Tensor, eps: float, gemma: bool,
                       round_once: bool, sum_precision: Optional[str] = None) -> None:
    kernels.fused_add_rms_norm(input, residual, weight, eps, gemma, round_once, sum_precision)


@fused_add_rms_norm.register_fake
def _(input, residual, weight, eps, gemma, round_once, sum_precision=None):
    check_meta(input, {"weight": weight}, {"residual": residual}, kernels.FUSED_ADD_FLOAT32_ROWS)


@torch.library.custom_op("pyrms::rms_norm_quant", mutates_args=())
def rms_norm_quant(x: Tensor, weight: Tensor, eps: float, out_dtype: torch.dtype, quant_mode: str,
                   scale: Optional[float], scale_tensor: Optional[Tensor], scale_ub: Optional[float],
                   scale_ub_tensor: Optional[Tensor], group_size: Optional[int], ue8m0: bool, column_major_scales: bool,
                   tma_aligned_scales: bool, round_input: bool, norm_out: bool) -> tuple[Tensor, Tensor, Tensor]:
    return quant.rms_norm_quant(x, weight, None, eps, out_dtype, quant_mode, scale, scale_tensor, scale_ub,
                                scale_ub_tensor, group_size, ue8m0, column_major_scales, tma_aligned_scales,
                                round_input, norm_out)


@rms_norm_quant.register_fake
def _(x, weight, *options):
    return quant.fake(x, weight, None, *options)


@torch.library.custom_op("pyrms::fused_add_rms_norm_quant", mutates_args=("residual",))
def fused_add_rms_norm_quant(x: Tensor, residual: Tensor, weight: Tensor, eps: float, out_dtype: torch.dtype,
                             quant_mode: str, scale: Optional[float], scale_tensor: Optional[Tensor],
                             scale_ub: Optional[float], scale_ub_tensor: Optional[Tensor], group_size: Optional[int],
                             ue8m0: bool, column_major_scales: bool, tma_aligned_scales: bool, round_input: bool,
                             norm_out: bool) -> tuple[Tensor, Tensor, Tensor]:
    return quant.rms_norm_quant(x, weight, residual, eps, out_dtype, quant_mode, scale, scale_tensor, scale_ub,
                                scale_ub_tensor, group_size, ue8m0, column_major_scales, tma_aligned_scales,
                                round_input, norm_out)


@fused_add_rms_norm_quant.register_fake
def _(x, residual, weight, *options):
    return quant.fake(x, weight, residual, *options)


@torch.library.custom_op("pyrms::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
    return kernels.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    check_meta(x, {"weight": weight, "bias": bias})
    return empty_rows_like(x)


@torch.library.custom_op("pyrms::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_out: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                        has_bias: bool) -> tuple[Tensor, Tensor, Tensor]:
    return kernels.layer_norm_backward(grad_out, x, weight, eps, has_bias)


@layer_norm_backward.register_fake
def _(grad_out, x, weight, eps, has_bias):
    check_meta(x, {"weight": weight}, {"grad_out": grad_out})
    return (empty_rows_like(x), kernels.parameter_grad_like(x, weight is not None),
            kernels.parameter_grad_like(x, has_bias))


def _save_layer_norm(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.has_bias = eps, bias is not None


def _layer_norm_grads(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_input, grad_weight, grad_bias = layer_norm_backward(grad, x, weight, ctx.eps, ctx.has_bias)
    return grad_input, None if weight is None else grad_weight, grad_bias if ctx.has_bias else None, None


layer_norm.register_autograd(_layer_norm_grads, setup_context=_save_layer_norm)


# --- eager autograd: the same backward without the custom op's dispatch ------------------------------


class RmsNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, gemma, round_once):
        _save_rms_norm(ctx, (x, weight, eps, gemma, round_once), None)
        return kernels.rms_norm(x, weight, eps, gemma, round_once)

    @staticmethod
    @once_differentiable  # pyrms's backward kernels have no backward: a second derivative raises
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_input, grad_weight = kernels.rms_norm_backward(grad, x, weight, ctx.eps, ctx.gemma)
        return grad_input, None if weight is None else grad_weight, None, None, None


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        _save_layer_norm(ctx, (x, weight, bias, eps), None)
        return kernels.layer_norm(x, weight, bias, eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_input, grad_weight, grad_bias = kernels.layer_norm_backward(grad, x, weight, ctx.eps, ctx.has_bias)
        return grad_input, None if weight is None else grad_weight, grad_bias if ctx.has_bias else None, None

"""fused_add_rms_norm for PyTorch: the in-place custom op ``torch.ops.pyrms.fused_add_rms_norm`` (fake
implementation; no autograd), the functional ``torch.ops.pyrms.add_rms_norm`` (fake implementation and autograd),
their eager launch on torch tensors, and the user functions ``pyrms.torch.fused_add_rms_norm`` (in place, for
inference) and ``pyrms.torch.add_rms_norm`` (new outputs, differentiable: for training).

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.fused_add_rms_norm(input, residual, weight, eps, gemma, round_once, sum_precision?) -> ()
        mutates input, residual
    torch.ops.pyrms.add_rms_norm(x, residual, weight?, eps, gemma, round_once, sum_precision?, fp32_residual)
        -> (y, residual_out)

In place, it cannot copy: ValueError for operands whose rows no one stride addresses. Routing:
pyrms/torch/_routing.py. No ``from __future__ import annotations`` here: torch infers the op's schema from
the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import (DTYPE_NAMES, as_float32, check_device, check_meta, current_stream, empty_rows_like,
                              in_place_stride, mixed, ptr)
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import increment_version as _increment_version
from ...torch._routing import records as _records
from ..rms_norm_backward import torch_binding as _backward
from .op import fused_add_rms_norm as _fused_add_rms_norm

__all__ = ["fused_add_rms_norm", "add_rms_norm"]

# fused_add_rms_norm's rows that may be float32 beside x of another dtype: an fp32 residual stream.
FLOAT32_ROWS = ("residual",)


def launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool,
           round_once: bool, sum_precision: str | None = None) -> None:
    """In place: residual <- x + residual, then x <- RMSNorm(residual) (see pyrms.torch.fused_add_rms_norm)."""
    dtype = check_meta(x, {"weight": weight}, {"residual": residual}, FLOAT32_ROWS, mixed_vectors=("weight",))
    device = check_device({"x": x, "residual": residual, "weight": weight})
    x_stride, residual_stride = in_place_stride("x", x), in_place_stride("residual", residual)
    numel = x.numel()
    if numel:
        hidden = x.shape[-1]
        mix = mixed(x, weight)  # read as float32: the kernel's fp32 weight beside 2-byte rows
        w = as_float32(weight) if mix else weight
        _fused_add_rms_norm(x.data_ptr(), residual.data_ptr(), ptr(w), eps, numel // hidden, hidden,
                            dtype=dtype, input_stride=x_stride, residual_stride=residual_stride,
                            stream=current_stream(device), gemma=gemma, round_once=round_once,
                            sum_precision=sum_precision, residual_dtype=DTYPE_NAMES[residual.dtype],
                            weight_dtype="float32" if mix and dtype != "float32" else None)


@torch.library.custom_op("pyrms::fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm_op(input: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float, gemma: bool,
                          round_once: bool, sum_precision: Optional[str] = None) -> None:
    launch(input, residual, weight, eps, gemma, round_once, sum_precision)


@fused_add_rms_norm_op.register_fake
def _(input, residual, weight, eps, gemma, round_once, sum_precision=None):
    check_meta(input, {"weight": weight}, {"residual": residual}, FLOAT32_ROWS, mixed_vectors=("weight",))


_FUSED_ADD_RMS_NORM = torch.ops.pyrms.fused_add_rms_norm.default


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *,
                       gemma: bool = False, round_once: bool = False, sum_precision: str | None = None) -> None:
    """vLLM's fused_add_rms_norm, in place: ``residual <- x + residual`` (added in fp32, rounded to the
    dtype), then ``x <- RMSNorm(residual, weight, eps)`` of that rounded sum. Returns None.

    ``x`` and ``residual``: CUDA tensors of one shape [..., hidden] and dtype, disjoint, each with its
    rows one stride apart (ValueError otherwise: an in-place op cannot work on a copy). ``weight``,
    ``eps``, ``gemma``, ``round_once``: as in the plain RMSNorm (pyrms.torch's); a weight of another dtype
    than x (fp32 weights under autocast) is read as float32, and x keeps its dtype (in place). ``sum_precision="fp32"`` normalizes the fp32 sum
    instead (FlashInfer's, SGLang's), and a torch.float32 ``residual`` beside bf16 or fp16 ``x`` is an
    fp32 residual stream that stores the sum exactly (QuACK's, Transformer Engine's): as in
    ``pyrms.fused_add_rms_norm``. No autograd: call it under ``torch.no_grad()``
    or ``torch.inference_mode()`` (RuntimeError when autograd would have to record it); to train, call
    ``add_rms_norm``, which computes the same into new tensors and has a backward.
    """
    if torch.compiler.is_compiling() or _dispatch_modes():
        _FUSED_ADD_RMS_NORM(x, residual, weight, float(eps), gemma, round_once, sum_precision)
        return
    if _records(x, weight, residual):
        raise RuntimeError("fused_add_rms_norm works in place and has no backward; call it under torch.no_grad() "
                           "or torch.inference_mode(), or train with pyrms.torch.add_rms_norm (the same sums, new outputs "
                           "and a backward)")
    launch(x, residual, weight, eps, gemma, round_once, sum_precision)
    # Written through raw pointers: tell autograd both changed, as torch's own in-place ops do.
    _increment_version(x)
    _increment_version(residual)


# --- the functional op, differentiable ----------------------------------------------------------------


def _add_launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool,
                round_once: bool, sum_precision: str | None, fp32_residual: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out) of add_rms_norm: the in-place kernel run over new tensors holding copies of x and
    residual (the kernel writes both; the copies keep autograd's inputs intact)."""
    check_meta(x, {"weight": weight}, {"residual": residual}, FLOAT32_ROWS, mixed_vectors=("weight",))
    y = empty_rows_like(x).copy_(x)
    residual_out = empty_rows_like(residual, torch.float32 if fp32_residual else None).copy_(residual)
    launch(y, residual_out, weight, eps, gemma, round_once, sum_precision)
    return y, residual_out


@torch.library.custom_op("pyrms::add_rms_norm", mutates_args=())
def add_rms_norm_op(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float, gemma: bool,
                    round_once: bool, sum_precision: Optional[str], fp32_residual: bool) -> tuple[Tensor, Tensor]:
    return _add_launch(x, residual, weight, eps, gemma, round_once, sum_precision, fp32_residual)


@add_rms_norm_op.register_fake
def _(x, residual, weight, eps, gemma, round_once, sum_precision, fp32_residual):
    check_meta(x, {"weight": weight}, {"residual": residual}, FLOAT32_ROWS, mixed_vectors=("weight",))
    return empty_rows_like(x), empty_rows_like(residual, torch.float32 if fp32_residual else None)


def _normalized_is_stored(x: torch.Tensor, residual_out: torch.Tensor, sum_precision: str | None) -> bool:
    """Whether residual_out holds exactly the rows that were normalized: the rounded sum (the default), the
    fp32 sum of an fp32 residual stream, or any sum of float32 rows. Else (sum_precision "fp32" beside a
    residual of x's 2-byte dtype) the fp32 sum normalized was never stored."""
    return sum_precision != "fp32" or residual_out.dtype == torch.float32


def _save_add_rms_norm(ctx, inputs, output):
    x, residual, weight, eps, gemma, _, sum_precision, _ = inputs  # round_once: the exact function's gradient
    stored = _normalized_is_stored(x, output[1], sum_precision)
    # The rows normalized: residual_out itself, or x and residual to add again in fp32 in the backward.
    ctx.save_for_backward(*((output[1], weight) if stored else (x, residual, weight)))
    ctx.stored, ctx.eps, ctx.gemma = stored, eps, gemma
    ctx.dtypes = (x.dtype, residual.dtype)


def _add_rms_norm_grads(ctx, grad_y, grad_residual_out):
    """x and residual share one gradient, the sum's: the norm's backward at the normalized rows plus what
    reached residual_out; the weight's from the norm's backward."""
    if ctx.stored:
        rows, weight = ctx.saved_tensors
    else:
        x, residual, weight = ctx.saved_tensors
        rows = x.float() + residual.float()  # the fp32 sum the forward normalized (__fadd_rn, as the kernel's)
    grad_rows, grad_weight = _backward.rms_norm_backward_op(
        grad_y if grad_y.dtype == rows.dtype else grad_y.float(), rows, weight, ctx.eps, ctx.gemma)
    if grad_residual_out is not None:
        grad_rows = grad_rows + grad_residual_out
    x_dtype, residual_dtype = ctx.dtypes
    return (grad_rows.to(x_dtype), grad_rows.to(residual_dtype), None if weight is None else grad_weight,
            None, None, None, None, None)


add_rms_norm_op.register_autograd(_add_rms_norm_grads, setup_context=_save_add_rms_norm)

_ADD_RMS_NORM = torch.ops.pyrms.add_rms_norm.default


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *,
                 gemma: bool = False, round_once: bool = False, sum_precision: str | None = None,
                 residual_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and RMSNorm of fused_add_rms_norm into new tensors, differentiable: returns
    ``(y, residual_out)`` with ``residual_out = x + residual`` and ``y = RMSNorm(residual_out, weight, eps)``,
    the same sums and bits as the in-place ``fused_add_rms_norm`` (``y`` in x's dtype; ``residual_out``
    in residual's, or float32 with ``residual_dtype=torch.float32``: the fp32 residual stream of QuACK and
    Transformer Engine, which stores the fp32 sum exactly and normalizes it). ``sum_precision``,
    ``gemma``, ``round_once``, and a weight of another dtype or None: as in ``fused_add_rms_norm``.

    The backward gives x and residual the one gradient of their sum: RMSNorm's backward at the normalized
    rows (pyrms's kernels, as for the plain RMSNorm: the gradient of the exact function, the weight's summed in a
    fixed order) plus the gradient reaching ``residual_out``, in each input's dtype. Works eagerly, under
    ``torch.compile(fullgraph=True)`` and in CUDA graphs (``torch.ops.pyrms.add_rms_norm``). Its forward
    copies x and residual before the in-place kernel, so it moves more memory than ``fused_add_rms_norm``.
    """
    if residual_dtype not in (None, residual.dtype, torch.float32):
        raise TypeError(f"residual_dtype must be None (the residual's, {residual.dtype}) or torch.float32, "
                        f"got {residual_dtype}")
    fp32_residual = residual_dtype is torch.float32 or residual.dtype == torch.float32
    return _ADD_RMS_NORM(x, residual, weight, float(eps), gemma, round_once, sum_precision, fp32_residual)

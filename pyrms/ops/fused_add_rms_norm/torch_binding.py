"""fused_add_rms_norm for PyTorch: the custom op ``torch.ops.pyrms.fused_add_rms_norm`` (fake implementation; no
autograd), its eager launch on torch tensors, and the user function ``pyrms.torch.fused_add_rms_norm``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.fused_add_rms_norm(input, residual, weight, eps, gemma, round_once, sum_precision?) -> ()
        mutates input, residual

In place, it cannot copy: ValueError for operands whose rows no one stride addresses. Routing:
pyrms/torch/_routing.py. No ``from __future__ import annotations`` here: torch infers the op's schema from
the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import DTYPE_NAMES, as_float32, check_device, check_meta, current_stream, in_place_stride, mixed
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import increment_version as _increment_version
from ...torch._routing import records as _records
from .op import fused_add_rms_norm as _fused_add_rms_norm

__all__ = ["fused_add_rms_norm"]

# fused_add_rms_norm's rows that may be float32 beside x of another dtype: an fp32 residual stream.
FLOAT32_ROWS = ("residual",)


def launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool,
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
        _fused_add_rms_norm(x.data_ptr(), residual.data_ptr(), w.data_ptr(), eps, numel // hidden, hidden,
                            dtype=dtype, input_stride=x_stride, residual_stride=residual_stride,
                            stream=current_stream(device), gemma=gemma, round_once=round_once,
                            sum_precision=sum_precision, residual_dtype=DTYPE_NAMES[residual.dtype],
                            weight_dtype="float32" if mix and dtype != "float32" else None)


@torch.library.custom_op("pyrms::fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm_op(input: Tensor, residual: Tensor, weight: Tensor, eps: float, gemma: bool,
                          round_once: bool, sum_precision: Optional[str] = None) -> None:
    launch(input, residual, weight, eps, gemma, round_once, sum_precision)


@fused_add_rms_norm_op.register_fake
def _(input, residual, weight, eps, gemma, round_once, sum_precision=None):
    check_meta(input, {"weight": weight}, {"residual": residual}, FLOAT32_ROWS, mixed_vectors=("weight",))


_FUSED_ADD_RMS_NORM = torch.ops.pyrms.fused_add_rms_norm.default


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
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
    or ``torch.inference_mode()`` (RuntimeError when autograd would have to record it).
    """
    if torch.compiler.is_compiling() or _dispatch_modes():
        _FUSED_ADD_RMS_NORM(x, residual, weight, float(eps), gemma, round_once, sum_precision)
        return
    if _records(x, weight, residual):
        raise RuntimeError("fused_add_rms_norm works in place and has no backward; call it under torch.no_grad() "
                           "or torch.inference_mode(), or use pyrms.torch's plain RMSNorm of x + residual to train")
    launch(x, residual, weight, eps, gemma, round_once, sum_precision)
    # Written through raw pointers: tell autograd both changed, as torch's own in-place ops do.
    _increment_version(x)
    _increment_version(residual)

"""pyrms's kernels as functions of torch tensors.

Each call launches on torch's current stream of the tensors' device (``with torch.cuda.stream(s):``
picks another), which must be the device pyrms launches on (``pyrms.driver.set_device``).

Routing: eagerly, a call goes straight to the launch (pyrms.torch._kernels), since a torch custom
op's dispatch costs more host time than the whole launch; through a torch.autograd.Function when
autograd must record it (grad mode on and an input requiring grad). Under torch.compile or
torch.export, and under a TorchDispatchMode (FakeTensorMode, make_fx tracing, FlopCounterMode), which
must see the op itself rather than a launch through raw pointers, it goes through the
``torch.ops.pyrms`` custom ops, which torch traces and differentiates.
"""
from __future__ import annotations

import torch

from . import _kernels as kernels
from ._ops import LayerNormFunction, RmsNormFunction  # importing _ops registers the torch.ops.pyrms ops

_RMS_NORM = torch.ops.pyrms.rms_norm.default
_FUSED_ADD_RMS_NORM = torch.ops.pyrms.fused_add_rms_norm.default
_LAYER_NORM = torch.ops.pyrms.layer_norm.default
_increment_version = torch.autograd.graph.increment_version
_dispatch_modes = torch._C._len_torch_dispatch_stack  # how many TorchDispatchModes are active


def _records(x, weight, other=None) -> bool:
    """Whether autograd must record an eager call on these tensors (weight and other: None where absent)."""
    try:
        return ((x.requires_grad or (weight is not None and weight.requires_grad)
                 or (other is not None and other.requires_grad)) and torch.is_grad_enabled())
    except AttributeError:
        return False  # not tensors: the launch raises the TypeError that says so


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *, gemma: bool = False,
             round_once: bool = False) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``, fp32 inside.

    ``x``: a CUDA tensor [..., hidden] of bfloat16, float16 or float32; ``weight``: [hidden], contiguous,
    of x's dtype (an ``nn.Parameter`` is fine), or None for no weight (``round(x * r)``, as
    ``torch.nn.RMSNorm(elementwise_affine=False)``; not with gemma). Rows one stride apart (contiguous tensors, slices
    such as ``big[..., :hidden]``) are read in place, and so are views whose leading dimensions collapse
    to at most three with the hidden one contiguous (QK-norm's ``qkv[:, :h*d].view(t, h, d)``, a
    transposed ``[b, h, s, d]``: pyrms's N-D kernel); other layouts from a contiguous copy. Returns a new tensor shaped like x, rows contiguous.

    Rounding: by default ``(T)((T)(x * r) * weight)``, Hugging Face LLaMA's and Qwen's formula;
    ``round_once=True`` rounds only the fp32 product ``x * r * weight`` (PyTorch's fused kernel);
    ``gemma=True`` multiplies by ``1 + weight``, the addition in fp32 (Gemma's RMSNorm is
    ``gemma=True, round_once=True``). Differentiable once in x and weight (pyrms's backward kernels,
    the gradient of the exact function; dweight summed over rows in a fixed order, bitwise
    reproducible, in weight's dtype; without a weight the backward computes dx alone, in one launch).
    With eps = 0 an all-zero row gives NaN, as in PyTorch.

    Raises TypeError for unsupported dtypes or mismatched ones, ValueError for CPU tensors, tensors
    on another device than pyrms's, or a weight of the wrong shape.
    """
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _RMS_NORM(x, weight, float(eps), gemma, round_once)
    if _records(x, weight):
        return RmsNormFunction.apply(x, weight, eps, gemma, round_once)
    return kernels.rms_norm(x, weight, eps, gemma, round_once)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                       gemma: bool = False, round_once: bool = False, sum_precision: str | None = None) -> None:
    """vLLM's fused_add_rms_norm, in place: ``residual <- x + residual`` (added in fp32, rounded to the
    dtype), then ``x <- rms_norm(residual, weight, eps)`` of that rounded sum. Returns None.

    ``x`` and ``residual``: CUDA tensors of one shape [..., hidden] and dtype, disjoint, each with its
    rows one stride apart (ValueError otherwise: an in-place op cannot work on a copy). ``weight``,
    ``eps``, ``gemma``, ``round_once``: as in rms_norm. ``sum_precision="fp32"`` normalizes the fp32 sum
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
                           "or torch.inference_mode(), or use rms_norm(x + residual, weight, eps) to train")
    kernels.fused_add_rms_norm(x, residual, weight, eps, gemma, round_once, sum_precision)
    # Written through raw pointers: tell autograd both changed, as torch's own in-place ops do.
    _increment_version(x)
    _increment_version(residual)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension: ``(x - mean) / sqrt(var + eps) * weight + bias`` (population
    variance; ``bias=None`` adds nothing, ``weight=None`` multiplies by nothing: with both None,
    ``torch.nn.LayerNorm(elementwise_affine=False)``), statistics and expression in fp32, rounded once.

    Operands, layouts and errors as in rms_norm; ``bias`` like ``weight``. Differentiable once in x,
    weight and bias (pyrms's backward kernels, the sums over rows in a fixed order; only the gradients
    of the tensors given are computed: with neither weight nor bias, dx alone in one launch).
    """
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _LAYER_NORM(x, weight, bias, float(eps))
    if _records(x, weight, bias):
        return LayerNormFunction.apply(x, weight, bias, eps)
    return kernels.layer_norm(x, weight, bias, eps)

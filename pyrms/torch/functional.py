"""pyrms's kernels as functions of torch tensors.

Each call launches on torch's current stream of the tensors' device (``with torch.cuda.stream(s):``
picks another), which must be the device pyrms launches on (``pyrms.driver.set_device``).

Routing: eagerly, a call goes straight to the launch (pyrms.torch._kernels), since a torch custom
op's dispatch costs more host time than the whole launch; through a torch.autograd.Function when
autograd must record it (grad mode on and an input requiring grad). Under torch.compile or
torch.export, and under a TorchDispatchMode (FakeTensorMode, make_fx tracing, FlopCounterMode), which
must see the op itself rather than a launch through raw pointers, it goes through the
``torch.ops.pyrms`` custom ops, which torch traces and differentiates.

The quantizing ops (rms_norm_quant, fused_add_rms_norm_quant; pyrms.torch._quant) have no backward: where
autograd would record rms_norm_quant it goes through its custom op, which torch records as any custom op
without an autograd formula (a backward through it raises); fused_add_rms_norm_quant, in place, refuses
then, as fused_add_rms_norm does. They return q, then the scales unless static, then norm_out if asked for.
"""
from __future__ import annotations

import numbers

import torch

from . import _kernels as kernels
from . import _quant as quant
from ._ops import LayerNormFunction, RmsNormFunction  # importing _ops registers the torch.ops.pyrms ops

_RMS_NORM = torch.ops.pyrms.rms_norm.default
_FUSED_ADD_RMS_NORM = torch.ops.pyrms.fused_add_rms_norm.default
_LAYER_NORM = torch.ops.pyrms.layer_norm.default
_RMS_NORM_QUANT = torch.ops.pyrms.rms_norm_quant.default
_FUSED_ADD_RMS_NORM_QUANT = torch.ops.pyrms.fused_add_rms_norm_quant.default
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


def _scale_pair(name: str, value) -> tuple[float | None, torch.Tensor | None]:
    """(value as a float, None) or (None, the tensor): the custom ops take a scale of either kind as two
    arguments. TypeError for anything else (an int pointer included: pyrms.torch takes tensors)."""
    if value is None or isinstance(value, torch.Tensor):
        return None, value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value), None
    raise TypeError(f"{name} must be a float or a one-element torch.float32 CUDA tensor, got {type(value).__name__}")


def _returned(mode: str, norm_out: bool, outputs: tuple) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The quantizing functions' return: q, then the scales unless static, then norm_out if asked for."""
    q, scales, normed = outputs
    picked = (q,) if mode == "static" else (q, scales)
    if norm_out:
        picked += (normed,)
    return picked[0] if len(picked) == 1 else picked


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                   out_dtype: torch.dtype = torch.float8_e4m3fn, mode: str = "static",
                   scale: float | torch.Tensor | None = None, scale_ub: float | torch.Tensor | None = None,
                   group_size: int | None = None, ue8m0: bool = False, column_major_scales: bool = False,
                   tma_aligned_scales: bool = False, round_input: bool = False,
                   norm_out: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """RMSNorm of x's rows quantized to ``out_dtype`` (torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8):
    pyrms.rms_norm_quant on torch tensors, into new ones (every formula: docs/numerics.md, "Quantized outputs").

    ``y = (x * inv_rms) * weight`` in fp32 (``round_input=True``: rms_norm's output rounded to x's dtype, what
    vLLM's kernels quantize), then by ``mode``; the return:

    - ``'static'``: ``q``. ``scale``: a float (finite, > 0 in fp32) or a one-element torch.float32 CUDA tensor,
      which the kernel reads on the stream (its value is not checked, as in vLLM).
    - ``'per_token'``: ``(q, scales)``, scales float32 of shape ``x.shape[:-1] + (1,)``, one per row (vLLM's
      ``rms_norm_dynamic_per_token_quant`` allocates ``(num_tokens, 1)`` for its 2-D input: the same for a
      2-D x; ``scales.view(-1, 1)`` is it for any x). ``scale_ub`` (float8 only): None, a float or a
      one-element float32 tensor, the bound on each row's absolute maximum.
    - ``'per_group'``: ``(q, scales)``, one scale per ``group_size`` (64 or 128, default 128; it must divide
      hidden) consecutive elements of a row, scales float32 of shape ``x.shape[:-1] + (hidden // group_size,)``,
      contiguous; ``ue8m0`` rounds each up to a power of two (DeepSeek's). ``column_major_scales``: the same
      shape over transposed memory, (groups, rows) with all leading dimensions' rows flattened, strides
      ``(1, rows)`` for a 2-D x, as vLLM's ``per_token_group_quant_fp8(column_major_scales=True)``;
      ``tma_aligned_scales`` pads rows to a multiple of 4, strides ``(1, padded rows)``, as vLLM's
      ``tma_aligned_scales`` for DeepGEMM (the padding is not written).

    ``norm_out=True`` appends the unquantized output, ``y`` rounded to x's dtype (bit for bit rms_norm's:
    its default rounding with ``round_input=True``, ``round_once=True``'s without): ``(q, y)`` for static,
    ``(q, scales, y)`` otherwise. ``q`` and ``y`` are new tensors shaped like x, rows contiguous.

    ``x``: a CUDA tensor [..., hidden] of bfloat16, float16 or float32; rows no one stride addresses are read
    from a contiguous copy. ``weight``: [hidden], contiguous, of x's dtype. Launches on torch's current
    stream; works under torch.compile(fullgraph=True) (``torch.ops.pyrms.rms_norm_quant``).

    Not differentiable. Under autograd (grad mode on, x or weight requiring grad, as an nn.Parameter does)
    the call goes through the custom op, as torch records any custom op: the floating outputs then require
    grad and a backward through them raises RuntimeError (no autograd formula). rms_norm is differentiable.

    Raises TypeError for unsupported dtypes (x's, weight's, out_dtype) and scale types, ValueError for a bad
    mode, group size or option, CPU tensors or a weight of the wrong shape; a scale out of range is refused
    at the launch, by pyrms.rms_norm_quant.
    """
    options = (out_dtype, mode, *_scale_pair("scale", scale), *_scale_pair("scale_ub", scale_ub), group_size, ue8m0,
               column_major_scales, tma_aligned_scales, round_input, norm_out)
    if torch.compiler.is_compiling() or _dispatch_modes() or _records(x, weight):
        outputs = _RMS_NORM_QUANT(x, weight, float(eps), *options)
    else:
        outputs = quant.rms_norm_quant(x, weight, None, eps, *options)
    return _returned(mode, norm_out, outputs)


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                             out_dtype: torch.dtype = torch.float8_e4m3fn, mode: str = "static",
                             scale: float | torch.Tensor | None = None,
                             scale_ub: float | torch.Tensor | None = None, group_size: int | None = None,
                             ue8m0: bool = False, column_major_scales: bool = False, tma_aligned_scales: bool = False,
                             round_input: bool = False,
                             norm_out: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """vLLM's residual add, then rms_norm_quant of the rounded sum: ``residual <- x + residual`` in place
    (added in fp32, rounded to the dtype, as fused_add_rms_norm; x is only read), then the return of
    ``rms_norm_quant(residual, weight, eps, ...)`` on the new residual, bit for bit, with the same arguments.

    ``residual``: x's shape and dtype, its rows one stride apart (ValueError otherwise: an in-place op cannot
    work on a copy); x's rows may lie anywhere (read from a copy where no one stride addresses them). No
    autograd: call it under ``torch.no_grad()`` or ``torch.inference_mode()`` (RuntimeError when autograd
    would have to record it), as fused_add_rms_norm.
    """
    options = (out_dtype, mode, *_scale_pair("scale", scale), *_scale_pair("scale_ub", scale_ub), group_size, ue8m0,
               column_major_scales, tma_aligned_scales, round_input, norm_out)
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _returned(mode, norm_out, _FUSED_ADD_RMS_NORM_QUANT(x, residual, weight, float(eps), *options))
    if _records(x, weight, residual):
        raise RuntimeError("fused_add_rms_norm_quant works in place and has no backward (quantized outputs are not "
                           "differentiable); call it under torch.no_grad() or torch.inference_mode()")
    outputs = quant.rms_norm_quant(x, weight, residual, eps, *options)
    _increment_version(residual)  # written through a raw pointer: tell autograd, as torch's in-place ops do
    return _returned(mode, norm_out, outputs)

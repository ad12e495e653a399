"""rms_norm_quant and fused_add_rms_norm_quant for PyTorch: the custom ops ``torch.ops.pyrms.rms_norm_quant``
and ``torch.ops.pyrms.fused_add_rms_norm_quant`` (fake implementations; no autograd formula), their eager launch
on torch tensors (one for both: pyrms.rms_norm_quant and fused_add_rms_norm_quant, their raw-pointer fast path,
called with torch's pointers, strides and current stream, into new outputs), and the user functions
``pyrms.torch.rms_norm_quant`` and ``pyrms.torch.fused_add_rms_norm_quant``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.rms_norm_quant(x, weight, eps, out_dtype, quant_mode, scale?, scale_tensor?, scale_ub?,
                                   scale_ub_tensor?, group_size?, ue8m0, column_major_scales, tma_aligned_scales,
                                   round_input, norm_out) -> (q, scales, norm_out)
    torch.ops.pyrms.fused_add_rms_norm_quant(x, residual, weight, eps, <the same>, sum_precision?)
        -> (q, scales, norm_out), mutates residual

The launch (``residual=None``: the plain op) returns ``(q, scales, norm_out)``: a custom op's outputs cannot be
None, so an output not asked for is an empty tensor (static's scales, the norm_out without ``norm_out=True``).
``check`` and ``outputs`` are what the fake implementations run too, so that fake and real outputs agree in
shape, dtype and strides. scale and scale_ub come as a float or a one-element fp32 tensor (scale_tensor,
scale_ub_tensor), at most one of each pair given; ``quant_mode`` is the functions' ``mode`` (an argument named
``mode`` collides with torch's auto_functionalized, which calls mutating custom ops with keyword arguments beside
a ``mode`` of its own). No autograd formula (quantized outputs are not differentiable): where autograd would
record rms_norm_quant it goes through its custom op, which torch records as any custom op without one (a
backward through its outputs raises torch's RuntimeError); fused_add_rms_norm_quant, in place, refuses then,
as the unquantized fused add does. The functions return q, then the scales unless static, then norm_out if asked for.

Scales, fp32: per token ``x.shape[:-1] + (1,)``, contiguous; per group ``x.shape[:-1] + (groups,)``,
row-major, or with ``column_major_scales`` that logical shape over memory (groups, rows): the rows of all
leading dimensions flattened, as the kernels address them, so a 2-D x's scales have strides (1, rows), as
vLLM's ``per_token_group_quant_fp8(column_major_scales=True)`` allocates them; ``tma_aligned_scales``
pads the rows to a multiple of 4 (16 bytes) as vLLM's ``tma_aligned_scales`` does for DeepGEMM's TMA loads,
strides (1, padded rows), the padding never written.

The fake implementations check dtypes and shapes as the kernels do, but not the device: which device pyrms
launches on is known only at run time. Routing: pyrms/torch/_routing.py. No ``from __future__ import
annotations`` here: torch infers each op's schema from the annotations as objects.
"""
import functools
import math
import numbers
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import (QUANT_ALLOWED, QUANT_NAMES, check_device, check_meta, current_stream, empty_rows_like,
                              in_place_stride, rows_of)
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import increment_version as _increment_version
from ...torch._routing import records as _records
from .._rms_row_plan import SUM_PRECISIONS
from .op import fused_add_rms_norm_quant as _fused_add_rms_norm_quant
from .op import rms_norm_quant as _rms_norm_quant
from .plan import plan_rms_norm_quant

__all__ = ["rms_norm_quant", "fused_add_rms_norm_quant"]

# Column-major scales with tma_aligned_scales: rows padded to a multiple of this (16 bytes of fp32).
TMA_ROWS = 4


@functools.lru_cache(maxsize=1024)
def _groups(dtype: str, hidden: int, out: str, mode: str, group_size: int | None) -> int:
    """Groups per row (0 unless per group), from pyrms's plan, which names a bad mode or group size; the plan
    is pure and costs the host microseconds, so its answer is kept per configuration."""
    p = plan_rms_norm_quant(dtype, hidden, out, mode=mode, group=group_size)
    return hidden // p.group_size if mode == "per_group" else 0


def _device_scalar(name: str, t: torch.Tensor | None) -> None:
    """A scale the kernel reads from device memory: one float32."""
    if t is None:
        return
    if t.dtype != torch.float32:
        raise TypeError(f"{name} as a tensor must be torch.float32, got {t.dtype}")
    if t.numel() != 1:
        raise ValueError(f"{name} as a tensor must hold one element, got shape {tuple(t.shape)}")


def check(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, out_dtype: torch.dtype, mode: str,
          scale: float | None, scale_tensor: torch.Tensor | None, scale_ub: float | None,
          scale_ub_tensor: torch.Tensor | None, group_size: int | None, ue8m0: bool, column_major_scales: bool,
          tma_aligned_scales: bool) -> tuple[str, str, int]:
    """The checks that need no data and no device: (x's pyrms dtype name, out_dtype's, groups per row, 0 unless
    per group). Scale values (finite, > 0) are the launch's to check, as pyrms.rms_norm_quant does."""
    name = check_meta(x, {"weight": weight}, None if residual is None else {"residual": residual})
    if weight is None:
        raise TypeError("weight must be a torch.Tensor, got None: the quantizing kernels have no weightless variant")
    out = QUANT_NAMES.get(out_dtype)
    if out is None:
        raise TypeError(f"out_dtype is {out_dtype!r}; pyrms.torch quantizes to {QUANT_ALLOWED}")
    groups = _groups(name, int(x.shape[-1]), out, mode, group_size)
    static = scale is not None or scale_tensor is not None
    if (mode == "static") != static:
        raise ValueError("mode='static' needs a scale (a float or a one-element float32 tensor)" if not static else
                         f"scale applies to mode='static' only; mode={mode!r} computes its scales and returns them")
    if scale_ub is not None or scale_ub_tensor is not None:
        if mode != "per_token":
            raise ValueError(f"scale_ub applies to mode='per_token' only, not {mode!r}")
        if out == "int8":
            raise ValueError("scale_ub applies to float8 outputs only (as in vLLM), not int8")
    _device_scalar("scale", scale_tensor)
    _device_scalar("scale_ub", scale_ub_tensor)
    if mode != "per_group" and (ue8m0 or column_major_scales or tma_aligned_scales):
        raise ValueError(f"ue8m0, column_major_scales and tma_aligned_scales apply to mode='per_group' only, "
                         f"not {mode!r}")
    if tma_aligned_scales and not column_major_scales:
        raise ValueError("tma_aligned_scales pads column-major scales: pass column_major_scales=True with it")
    return name, out, groups


def outputs(x: torch.Tensor, out_dtype: torch.dtype, mode: str, groups: int, column_major_scales: bool,
            tma_aligned_scales: bool, norm_out: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New (q, scales, norm_out) for x's rows; an output not asked for is empty (module docstring: layouts)."""
    q = empty_rows_like(x, out_dtype)
    lead = x.shape[:-1]
    if mode == "static":
        scales = x.new_empty(0, dtype=torch.float32)
    elif mode == "per_token":
        scales = x.new_empty((*lead, 1), dtype=torch.float32)
    elif not column_major_scales:
        scales = x.new_empty((*lead, groups), dtype=torch.float32)
    else:
        rows = math.prod(lead)
        span = -(-rows // TMA_ROWS) * TMA_ROWS if tma_aligned_scales else rows
        steps = [1]  # the flattened rows' strides, innermost first
        for size in reversed(lead[1:]):
            steps.append(steps[-1] * size)
        scales = x.new_empty_strided((*lead, groups), (*reversed(steps[:len(lead)]), span), dtype=torch.float32)
    return q, scales, empty_rows_like(x) if norm_out else x.new_empty(0)


def launch(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, eps: float, out_dtype: torch.dtype,
           mode: str, scale: float | None, scale_tensor: torch.Tensor | None, scale_ub: float | None,
           scale_ub_tensor: torch.Tensor | None, group_size: int | None, ue8m0: bool, column_major_scales: bool,
           tma_aligned_scales: bool, round_input: bool, norm_out: bool,
           sum_precision: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scales, norm_out) of x's rows (see pyrms.torch.rms_norm_quant); with a residual, the fused op:
    residual <- x + residual in place first, its sum normalized as ``sum_precision`` says (see
    pyrms.torch.fused_add_rms_norm_quant)."""
    dtype, out, groups = check(x, weight, residual, out_dtype, mode, scale, scale_tensor, scale_ub, scale_ub_tensor,
                               group_size, ue8m0, column_major_scales, tma_aligned_scales)
    residual_stride = None if residual is None else in_place_stride("residual", residual)
    device = check_device({"x": x, "residual": residual, "weight": weight, "scale": scale_tensor,
                           "scale_ub": scale_ub_tensor})
    x, stride = rows_of(x)  # x is only read: rows no one stride addresses are read from a copy
    q, scales, normed = outputs(x, out_dtype, mode, groups, column_major_scales, tma_aligned_scales, norm_out)
    numel = x.numel()
    if not numel:
        return q, scales, normed
    hidden = x.shape[-1]
    given = scale_tensor.data_ptr() if scale_tensor is not None else scale  # a device pointer or a float
    bound = scale_ub_tensor.data_ptr() if scale_ub_tensor is not None else scale_ub
    options = dict(scale=given if mode == "static" else scales.data_ptr(), out_dtype=out, mode=mode, scale_ub=bound,
                   group_size=group_size, ue8m0=ue8m0, column_major_scales=column_major_scales,
                   scale_stride=scales.stride(-1) if column_major_scales else None, dtype=dtype, input_stride=stride,
                   out_stride=hidden, norm_out=normed.data_ptr() if norm_out else None,
                   norm_out_stride=hidden if norm_out else None, stream=current_stream(device),
                   round_input=round_input)
    if residual is None:
        _rms_norm_quant(q.data_ptr(), x.data_ptr(), weight.data_ptr(), eps, numel // hidden, hidden, **options)
    else:
        _fused_add_rms_norm_quant(q.data_ptr(), x.data_ptr(), residual.data_ptr(), weight.data_ptr(), eps,
                                  numel // hidden, hidden, residual_stride=residual_stride, sum_precision=sum_precision,
                                  **options)
    return q, scales, normed


def fake(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, eps: float, out_dtype: torch.dtype,
         mode: str, scale: float | None, scale_tensor: torch.Tensor | None, scale_ub: float | None,
         scale_ub_tensor: torch.Tensor | None, group_size: int | None, ue8m0: bool, column_major_scales: bool,
         tma_aligned_scales: bool, round_input: bool, norm_out: bool,
         sum_precision: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fake implementations' (q, scales, norm_out): rms_norm_quant's checks and outputs, without a launch."""
    if sum_precision not in (None, *SUM_PRECISIONS):
        raise ValueError(f"sum_precision must be one of {', '.join(map(repr, SUM_PRECISIONS))} or None, "
                         f"got {sum_precision!r}")
    _, _, groups = check(x, weight, residual, out_dtype, mode, scale, scale_tensor, scale_ub, scale_ub_tensor,
                         group_size, ue8m0, column_major_scales, tma_aligned_scales)
    return outputs(x, out_dtype, mode, groups, column_major_scales, tma_aligned_scales, norm_out)


# --- the custom ops -------------------------------------------------------------------------------------


@torch.library.custom_op("pyrms::rms_norm_quant", mutates_args=())
def rms_norm_quant_op(x: Tensor, weight: Tensor, eps: float, out_dtype: torch.dtype, quant_mode: str,
                   scale: Optional[float], scale_tensor: Optional[Tensor], scale_ub: Optional[float],
                   scale_ub_tensor: Optional[Tensor], group_size: Optional[int], ue8m0: bool, column_major_scales: bool,
                   tma_aligned_scales: bool, round_input: bool, norm_out: bool) -> tuple[Tensor, Tensor, Tensor]:
    return launch(x, weight, None, eps, out_dtype, quant_mode, scale, scale_tensor, scale_ub,
                                scale_ub_tensor, group_size, ue8m0, column_major_scales, tma_aligned_scales,
                                round_input, norm_out)


@rms_norm_quant_op.register_fake
def _(x, weight, *options):
    return fake(x, weight, None, *options)


@torch.library.custom_op("pyrms::fused_add_rms_norm_quant", mutates_args=("residual",))
def fused_add_rms_norm_quant_op(x: Tensor, residual: Tensor, weight: Tensor, eps: float, out_dtype: torch.dtype,
                             quant_mode: str, scale: Optional[float], scale_tensor: Optional[Tensor],
                             scale_ub: Optional[float], scale_ub_tensor: Optional[Tensor], group_size: Optional[int],
                             ue8m0: bool, column_major_scales: bool, tma_aligned_scales: bool, round_input: bool,
                             norm_out: bool, sum_precision: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor]:
    return launch(x, weight, residual, eps, out_dtype, quant_mode, scale, scale_tensor, scale_ub,
                                scale_ub_tensor, group_size, ue8m0, column_major_scales, tma_aligned_scales,
                                round_input, norm_out, sum_precision)


@fused_add_rms_norm_quant_op.register_fake
def _(x, residual, weight, *options):
    return fake(x, weight, residual, *options)


# --- the user functions ---------------------------------------------------------------------------------

_RMS_NORM_QUANT = torch.ops.pyrms.rms_norm_quant.default
_FUSED_ADD_RMS_NORM_QUANT = torch.ops.pyrms.fused_add_rms_norm_quant.default


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

    ``y = (x * inv_rms) * weight`` in fp32 (``round_input=True``: the plain RMSNorm's output rounded to x's dtype, what
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

    ``norm_out=True`` appends the unquantized output, ``y`` rounded to x's dtype (bit for bit the plain RMSNorm's:
    its default rounding with ``round_input=True``, ``round_once=True``'s without): ``(q, y)`` for static,
    ``(q, scales, y)`` otherwise. ``q`` and ``y`` are new tensors shaped like x, rows contiguous.

    ``x``: a CUDA tensor [..., hidden] of bfloat16, float16 or float32; rows no one stride addresses are read
    from a contiguous copy. ``weight``: [hidden], contiguous, of x's dtype. Launches on torch's current
    stream; works under torch.compile(fullgraph=True) (``torch.ops.pyrms.rms_norm_quant``).

    Not differentiable. Under autograd (grad mode on, x or weight requiring grad, as an nn.Parameter does)
    the call goes through the custom op, as torch records any custom op: the floating outputs then require
    grad and a backward through them raises RuntimeError (no autograd formula). The plain RMSNorm is differentiable.

    Raises TypeError for unsupported dtypes (x's, weight's, out_dtype) and scale types, ValueError for a bad
    mode, group size or option, CPU tensors or a weight of the wrong shape; a scale out of range is refused
    at the launch, by pyrms.rms_norm_quant.
    """
    options = (out_dtype, mode, *_scale_pair("scale", scale), *_scale_pair("scale_ub", scale_ub), group_size, ue8m0,
               column_major_scales, tma_aligned_scales, round_input, norm_out)
    if torch.compiler.is_compiling() or _dispatch_modes() or _records(x, weight):
        outputs = _RMS_NORM_QUANT(x, weight, float(eps), *options)
    else:
        outputs = launch(x, weight, None, eps, *options)
    return _returned(mode, norm_out, outputs)


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
                             out_dtype: torch.dtype = torch.float8_e4m3fn, mode: str = "static",
                             scale: float | torch.Tensor | None = None,
                             scale_ub: float | torch.Tensor | None = None, group_size: int | None = None,
                             ue8m0: bool = False, column_major_scales: bool = False, tma_aligned_scales: bool = False,
                             round_input: bool = False, norm_out: bool = False,
                             sum_precision: str | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """vLLM's residual add, then rms_norm_quant of the rounded sum: ``residual <- x + residual`` in place
    (added in fp32, rounded to the dtype, as the unquantized fused add; x is only read), then the return of
    ``rms_norm_quant(residual, weight, eps, ...)`` on the new residual, bit for bit, with the same arguments.

    ``residual``: x's shape and dtype, its rows one stride apart (ValueError otherwise: an in-place op cannot
    work on a copy); x's rows may lie anywhere (read from a copy where no one stride addresses them). No
    autograd: call it under ``torch.no_grad()`` or ``torch.inference_mode()`` (RuntimeError when autograd
    would have to record it), as the unquantized fused add. ``sum_precision="fp32"`` normalizes the fp32 sum
    instead of the rounded one (FlashInfer's ``fused_add_rmsnorm_quant``; the residual is still stored rounded),
    as ``pyrms.fused_add_rms_norm_quant``'s; None or ``"rounded"``: the rounded sum.
    """
    options = (out_dtype, mode, *_scale_pair("scale", scale), *_scale_pair("scale_ub", scale_ub), group_size, ue8m0,
               column_major_scales, tma_aligned_scales, round_input, norm_out, sum_precision)
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _returned(mode, norm_out, _FUSED_ADD_RMS_NORM_QUANT(x, residual, weight, float(eps), *options))
    if _records(x, weight, residual):
        raise RuntimeError("fused_add_rms_norm_quant works in place and has no backward (quantized outputs are not "
                           "differentiable); call it under torch.no_grad() or torch.inference_mode()")
    outputs = launch(x, weight, residual, eps, *options)
    _increment_version(residual)  # written through a raw pointer: tell autograd, as torch's in-place ops do
    return _returned(mode, norm_out, outputs)

"""The quantizing ops on torch tensors, without autograd: pyrms.rms_norm_quant and fused_add_rms_norm_quant
(their raw-pointer fast path) called with torch's pointers, strides and current stream, into new outputs.

One function serves both ops (``residual=None``: the plain one) and returns ``(q, scales, norm_out)``: a
custom op's outputs cannot be None, so an output not asked for is an empty tensor (static's scales, the
norm_out without ``norm_out=True``). ``check`` and ``outputs`` are what the fake implementations run too, so
that fake and real outputs agree in shape, dtype and strides.

Scales, fp32: per token ``x.shape[:-1] + (1,)``, contiguous; per group ``x.shape[:-1] + (groups,)``,
row-major, or with ``column_major_scales`` that logical shape over memory (groups, rows): the rows of all
leading dimensions flattened, as the kernels address them, so a 2-D x's scales have strides (1, rows), as
vLLM's ``per_token_group_quant_fp8(column_major_scales=True)`` allocates them; ``tma_aligned_scales``
pads the rows to a multiple of 4 (16 bytes) as vLLM's ``tma_aligned_scales`` does for DeepGEMM's TMA loads,
strides (1, padded rows), the padding never written.
"""
from __future__ import annotations

import functools
import math

import torch

from .. import fused_add_rms_norm_quant as _fused_add_rms_norm_quant
from .. import rms_norm_quant as _rms_norm_quant
from ._layout import check_device, check_meta, current_stream, empty_rows_like, in_place_stride, rows_of
from ..ops.rms_norm_quant import plan as quant_plan

# torch dtype -> pyrms's name: the quantized outputs the kernels write.
QUANT_NAMES = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2", torch.int8: "int8"}
_QUANT_ALLOWED = "torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8"
# Column-major scales with tma_aligned_scales: rows padded to a multiple of this (16 bytes of fp32).
TMA_ROWS = 4


@functools.lru_cache(maxsize=1024)
def _groups(dtype: str, hidden: int, out: str, mode: str, group_size: int | None) -> int:
    """Groups per row (0 unless per group), from pyrms's plan, which names a bad mode or group size; the plan
    is pure and costs the host microseconds, so its answer is kept per configuration."""
    p = quant_plan.plan_rms_norm_quant(dtype, hidden, out, mode=mode, group=group_size)
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
        raise TypeError(f"out_dtype is {out_dtype!r}; pyrms.torch quantizes to {_QUANT_ALLOWED}")
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


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, eps: float,
                   out_dtype: torch.dtype, mode: str, scale: float | None, scale_tensor: torch.Tensor | None,
                   scale_ub: float | None, scale_ub_tensor: torch.Tensor | None, group_size: int | None, ue8m0: bool,
                   column_major_scales: bool, tma_aligned_scales: bool, round_input: bool,
                   norm_out: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scales, norm_out) of x's rows (see pyrms.torch.rms_norm_quant); with a residual, the fused op:
    residual <- x + residual in place first (see pyrms.torch.fused_add_rms_norm_quant)."""
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
                                  numel // hidden, hidden, residual_stride=residual_stride, **options)
    return q, scales, normed


def fake(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, eps: float, out_dtype: torch.dtype,
         mode: str, scale: float | None, scale_tensor: torch.Tensor | None, scale_ub: float | None,
         scale_ub_tensor: torch.Tensor | None, group_size: int | None, ue8m0: bool, column_major_scales: bool,
         tma_aligned_scales: bool, round_input: bool,
         norm_out: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fake implementations' (q, scales, norm_out): rms_norm_quant's checks and outputs, without a launch."""
    _, _, groups = check(x, weight, residual, out_dtype, mode, scale, scale_tensor, scale_ub, scale_ub_tensor,
                         group_size, ue8m0, column_major_scales, tma_aligned_scales)
    return outputs(x, out_dtype, mode, groups, column_major_scales, tma_aligned_scales, norm_out)

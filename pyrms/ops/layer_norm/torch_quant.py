"""layer_norm_quant for PyTorch: the custom op ``torch.ops.pyrms.layer_norm_quant`` (fake implementation; no
autograd formula), its eager launch on torch tensors (pyrms.layer_norm_quant's raw-pointer path, called with torch's
pointers, strides and current stream, into a new output), and the user function ``pyrms.torch.layer_norm_quant``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.layer_norm_quant(x, weight?, bias?, eps, out_dtype, scale?, scale_tensor?, round_input) -> q

The scale comes as a float or a one-element fp32 tensor (scale, scale_tensor), exactly one of them, as
rms_norm_quant's custom op takes its static scale. No autograd formula (a quantized output is not differentiable):
where autograd would record it, the call goes through the custom op, which torch records as any custom op without
one. Routing: pyrms/torch/_routing.py. No ``from __future__ import annotations`` here: torch infers the op's schema
from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import QUANT_ALLOWED, QUANT_NAMES, as_float32, check_device, current_stream, empty_rows_like, ptr, rows_of
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import records as _records
from ..rms_norm_quant.torch_binding import _device_scalar, _scale_pair
from .quant import layer_norm_quant as _layer_norm_quant
from .torch_binding import _check

__all__ = ["layer_norm_quant"]


def check(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, out_dtype: torch.dtype,
          scale: float | None, scale_tensor: torch.Tensor | None) -> tuple[str, str, bool]:
    """The checks that need no data and no device: (x's pyrms dtype name, out_dtype's, whether the weight and bias
    are of another dtype than x, read as float32). The scale's value (finite, > 0) is the launch's to check."""
    dtype, mix = _check(x, weight, bias)
    out = QUANT_NAMES.get(out_dtype)
    if out is None:
        raise TypeError(f"out_dtype is {out_dtype!r}; pyrms.torch quantizes to {QUANT_ALLOWED}")
    if (scale is None) == (scale_tensor is None):
        raise ValueError("layer_norm_quant takes one static scale: a float or a one-element float32 tensor")
    _device_scalar("scale", scale_tensor)
    return dtype, out, mix


def launch(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
           out_dtype: torch.dtype, scale: float | None, scale_tensor: torch.Tensor | None,
           round_input: bool) -> torch.Tensor:
    """q of x's rows, a new tensor (see pyrms.torch.layer_norm_quant)."""
    dtype, out, mix = check(x, weight, bias, out_dtype, scale, scale_tensor)
    device = check_device({"x": x, "weight": weight, "bias": bias, "scale": scale_tensor})
    x, stride = rows_of(x)  # x is only read: rows no one stride addresses are read from a copy
    q = empty_rows_like(x, out_dtype)
    numel = x.numel()
    if numel:
        hidden = x.shape[-1]
        kind = "float32" if mix and dtype != "float32" else None  # fp32 rows: one dtype all through
        if mix:
            weight, bias = as_float32(weight), as_float32(bias)
        _layer_norm_quant(q.data_ptr(), x.data_ptr(), ptr(weight), ptr(bias), eps, numel // hidden, hidden,
                          scale=scale if scale_tensor is None else scale_tensor.data_ptr(), out_dtype=out, dtype=dtype,
                          input_stride=stride, out_stride=hidden, stream=current_stream(device),
                          round_input=round_input, weight_dtype=kind)
    return q


@torch.library.custom_op("pyrms::layer_norm_quant", mutates_args=())
def layer_norm_quant_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                        out_dtype: torch.dtype, scale: Optional[float], scale_tensor: Optional[Tensor],
                        round_input: bool) -> Tensor:
    return launch(x, weight, bias, eps, out_dtype, scale, scale_tensor, round_input)


@layer_norm_quant_op.register_fake
def _(x, weight, bias, eps, out_dtype, scale, scale_tensor, round_input):
    check(x, weight, bias, out_dtype, scale, scale_tensor)
    return empty_rows_like(x, out_dtype)


_LAYER_NORM_QUANT = torch.ops.pyrms.layer_norm_quant.default


def layer_norm_quant(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None,
                     eps: float = 1e-5, *, scale: float | torch.Tensor,
                     out_dtype: torch.dtype = torch.float8_e4m3fn, round_input: bool = False) -> torch.Tensor:
    """LayerNorm of x's rows quantized to ``out_dtype`` (torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8)
    through one static ``scale``: pyrms.layer_norm_quant on torch tensors, into a new one (FlashInfer's
    ``layernorm_quant``; every formula: docs/numerics.md, "Quantized outputs").

    ``v = ((x - mean) * inv) * weight + bias`` in fp32, ``pyrms.torch.layer_norm``'s statistics and expression
    (``round_input=True``: its output rounded to x's dtype, what FlashInfer's kernel quantizes), then float8
    ``saturate(v * (1/scale))``, int8 ``saturate(rint(v / scale))``. ``scale``: a float (finite, > 0 in fp32) or a
    one-element torch.float32 CUDA tensor, which the kernel reads on the stream (its value not checked).
    ``weight``, ``bias``: as ``pyrms.torch.layer_norm`` takes them (None: none; of another dtype than x, e.g.
    FlashInfer's fp32 gamma and beta beside bf16 rows: read as float32). Returns q, a new tensor shaped like x,
    rows contiguous. Launches on torch's current stream; works under torch.compile(fullgraph=True)
    (``torch.ops.pyrms.layer_norm_quant``). Not differentiable (a backward through q raises RuntimeError).
    """
    options = (out_dtype, *_scale_pair("scale", scale), round_input)
    if torch.compiler.is_compiling() or _dispatch_modes() or _records(x, weight, bias):
        return _LAYER_NORM_QUANT(x, weight, bias, float(eps), *options)
    return launch(x, weight, bias, eps, *options)

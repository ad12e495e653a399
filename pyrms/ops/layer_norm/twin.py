"""layer_norm's and layer_norm_quant's numpy references and bit-exact twins (on the row core's twin,
pyrms/ops/_row_twin.py), and layer_norm_backward's float64 reference (its twin is the norm backward's,
pyrms/ops/_norm_backward/twin.py)."""
from __future__ import annotations

import numpy as np

from ... import dtypes
from .._norm_backward.twin import norm_backward_ref
from .._row_twin import F32, _as_2d, _one_nan, _out, row_stats_twin
from ..rms_norm_quant.twin import quantize_static

__all__ = ["layer_norm_ref", "layer_norm_twin", "layer_norm_quant_ref", "layer_norm_quant_twin",
           "layer_norm_backward_ref"]  # what pyrms.reference gathers


def layer_norm_ref(x, weight, bias, epsilon, *, rms=False):
    """float64 LayerNorm of the rows of x: (x - mean) / sqrt(var + eps) * w + b (population variance;
    weight None: w = 1, bias None: b = 0); rms: RMSNorm with a bias, x / sqrt(mean(x^2) + eps) * w + b."""
    x64 = _as_2d(x).astype(np.float64)
    centered = x64 if rms else x64 - x64.mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean(centered * centered, axis=1, keepdims=True) + float(epsilon))
    w64 = 1.0 if weight is None else np.asarray(weight).astype(np.float64)
    b64 = 0.0 if bias is None else np.asarray(bias).astype(np.float64)
    return centered * inv * w64 + b64


def _values(x, weight, bias, epsilon, block, row_phases, rms) -> np.ndarray:
    """The kernels' fp32 values ((x - mean) * inv) * w + b, before the store rounds or quantizes them: every step
    one float32 operation, the statistics the row core's tree's."""
    xf = x.astype(F32)
    mean, inv = row_stats_twin(xf, epsilon, block, row_phases, dtypes.get(x.dtype).vec_elems, centered=not rms)
    y = (xf if rms else xf - mean[:, None]) * inv[:, None]
    if weight is not None:
        y = y * np.asarray(weight).astype(F32)
    if bias is not None:
        y = y + np.asarray(bias).astype(F32)
    return y


def layer_norm_twin(x, weight, bias, epsilon, *, block, row_phases=0, out_dtype=None, rms=False):
    """Bit-exact twin of layer_norm_kernel: fp32 two-pass statistics, one rounding at the end (none for an
    fp32 out_dtype beside bf16/fp16 rows). bias None: no bias term (no addition of 0, which would turn -0
    into +0); weight None: no weight (the kernel's product by 1, exact). weight and bias: of the storage
    dtype or float32, their fp32 values either way. A NaN output is the GPU's one NaN (_one_nan), as every row op's.
    rms: RMSNorm with a bias (the kernel's RMS): RMSNorm's statistics, nothing subtracted."""
    x = _as_2d(x)
    y = _values(x, weight, bias, epsilon, block, row_phases, rms)
    return _one_nan(y.astype(_out(dtypes.get(x.dtype), out_dtype).numpy))


def layer_norm_quant_ref(x, weight, bias, epsilon, scale) -> np.ndarray:
    """float64 spelling of FlashInfer's layernorm_quant formula, before the cast: ``(((x - E[x]) / sqrt(Var[x] +
    eps)) * gamma + beta) / scale`` (weight None: gamma = 1; bias None: beta = 0). Saturated and cast to the
    output dtype it is the quantized output, up to the fp32 roundings of the kernel."""
    return layer_norm_ref(x, weight, bias, epsilon) / float(np.float32(scale))


def layer_norm_quant_twin(x, weight, bias, epsilon, scale, out_dtype, *, block, row_phases=0,
                          round_input=False) -> np.ndarray:
    """Bit-exact twin of layer_norm_quant_kernel: layer_norm_twin's fp32 values (its statistics, bit for bit),
    quantized through one static scale (quantize_static: float8 ``v * (1/scale)``, int8 ``v / scale``, then
    saturated; ``scale`` finite and > 0 in float32). round_input: the values rounded to x's dtype first, the
    forward's output bit for bit, as FlashInfer's kernel quantizes it."""
    x = _as_2d(x)
    y = _values(x, weight, bias, epsilon, block, row_phases, False)
    if round_input:
        y = y.astype(x.dtype).astype(F32)
    return quantize_static(y, scale, out_dtype)


def layer_norm_backward_ref(dy, x, weight, epsilon):
    """float64 (dx, dweight, dbias) of LayerNorm: dx = r * (g - mean(g) - x_hat * mean(x_hat * g)).
    weight None: g = dy, and (dx, dbias)."""
    return norm_backward_ref(dy, x, weight, epsilon, centered=True, grad_bias=True)

"""The numpy references and bit-exact twins of every kernel, in one namespace (no GPU, no CUDA import).

Each op family keeps its own in its folder (``pyrms/ops/<family>/twin.py``, on the row core's twin in
``pyrms/ops/_row_twin.py``); this module gathers the ones users call:

- ``*_ref``: float64, the mathematical definition; for tolerances.
- ``*_twin``: the kernel's arithmetic reproduced bit for bit: the same per-thread accumulation order (by
  the row's alignment), the same butterfly reduction, the same correctly rounded fp32 operations (numpy's
  float32 ufuncs round to nearest and never fuse), the same conversions (ml_dtypes and numpy round to
  nearest even, like __float2*_rn).
- ``seed_rms_norm_cpu``: the seed program's own CPU loop (``rms_norm_cpu`` in its C++ source).
- ``quantize_static``, ``quantize_per_token``, ``quantize_per_group``: the fp8/int8 output step on fp32
  normalized rows (docs/numerics.md, "Quantized outputs").
"""
from .ops._row_twin import block_sum_twin, inv_rms_twin, row_stats_twin, scale_twin, sum_squares_twin
from .ops.fused_add_rms_norm.twin import fused_add_rms_norm_ref, fused_add_rms_norm_twin, rounded_sum
from .ops.layer_norm.twin import layer_norm_ref, layer_norm_twin
from .ops.rms_norm.twin import rms_norm_ref, rms_norm_twin
from .ops.rms_norm_backward.twin import (chunk_sums_twin, layer_norm_backward_ref, norm_backward_twin,
                                         rms_norm_backward_ref, sum_partials_twin)
from .ops.rms_norm_quant.twin import (fused_add_rms_norm_quant_twin, normalized_twin, quantize_per_group,
                                      quantize_per_token, quantize_static, rms_norm_quant_twin)
from .ops.seed.twin import seed_rms_norm_cpu

__all__ = ["rms_norm_ref", "rms_norm_twin", "seed_rms_norm_cpu", "fused_add_rms_norm_ref", "fused_add_rms_norm_twin",
           "rounded_sum", "layer_norm_ref", "layer_norm_twin", "rms_norm_backward_ref", "layer_norm_backward_ref",
           "norm_backward_twin", "chunk_sums_twin", "sum_partials_twin", "quantize_static", "quantize_per_token",
           "quantize_per_group", "normalized_twin", "rms_norm_quant_twin", "fused_add_rms_norm_quant_twin",
           "block_sum_twin", "sum_squares_twin", "inv_rms_twin", "row_stats_twin", "scale_twin"]

"""The numpy references and bit-exact twins of every kernel, in one namespace (no GPU, no CUDA import).

Each op family keeps its own in its folder (``pyrms/ops/<family>/twin.py``, on the row core's twin in
``pyrms/ops/_row_twin.py``), and its registry entry names it (``OpSpec.twin``); this module gathers what each
lists in ``__all__``:

- ``*_ref``: float64, the mathematical definition; for tolerances.
- ``*_twin``: the kernel's arithmetic reproduced bit for bit: the same per-thread accumulation order (by
  the row's alignment), the same butterfly reduction, the same correctly rounded fp32 operations (numpy's
  float32 ufuncs round to nearest and never fuse), the same conversions (ml_dtypes and numpy round to
  nearest even, like __float2*_rn).
- ``seed_rms_norm_cpu``: the seed program's own CPU loop (``rms_norm_cpu`` in its C++ source).
- ``quantize_static``, ``quantize_per_token``, ``quantize_per_group``: the fp8/int8 output step on fp32
  normalized rows (docs/numerics.md, "Quantized outputs").
- The row core's shared steps: ``block_sum_twin``, ``sum_squares_twin``, ``inv_rms_twin``, ``row_stats_twin``,
  ``scale_twin``.
- The norm backward's, shared by RMSNorm's and LayerNorm's (``centered``: the mean subtracted; in
  ``pyrms/ops/_norm_backward/twin.py``): ``norm_backward_ref``, ``norm_backward_twin`` and its sums over rows,
  ``chunk_sums_twin`` and ``sum_partials_twin``.
"""
import importlib

from .ops import registry
from .ops._norm_backward.twin import chunk_sums_twin, norm_backward_ref, norm_backward_twin, sum_partials_twin
from .ops._row_twin import block_sum_twin, inv_rms_twin, row_stats_twin, scale_twin, sum_squares_twin

__all__ = ["block_sum_twin", "sum_squares_twin", "inv_rms_twin", "row_stats_twin", "scale_twin", "norm_backward_ref",
           "norm_backward_twin", "chunk_sums_twin", "sum_partials_twin"]

for _module in dict.fromkeys(spec.twin for spec in registry.REGISTRY.values() if spec.twin):
    _twins = importlib.import_module(_module)
    for _name in _twins.__all__:
        if _name in globals():
            raise ImportError(f"{_module} and another twin module both export {_name}")
        globals()[_name] = getattr(_twins, _name)
        __all__.append(_name)
del _module, _twins, _name

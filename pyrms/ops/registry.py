"""The registry: one declaration (an ``OpSpec``, pyrms/ops/_spec.py) per op, written in its family's folder
(``spec.py``).

Everything that enumerates ops iterates this registry instead of keeping a list of op names: the
precompile units (``pyrms.precompile``), the kernel inspection tool (``tools/ptx_dump.py``), the PyTorch
binding (``pyrms.torch``), the benchmark, and the case matrix, the randomized check and the sanitizer sweep
(under ``tests/`` and ``tools/``). Adding an op family is its folder plus one entry in ``_FAMILIES`` below.
Pure: importing it touches no GPU.
"""
from __future__ import annotations

from ._spec import OpSpec
from .dynamic_quant import spec as dynamic_quant
from .fused_add_rms_norm import spec as fused_add_rms_norm
from .gated_rms_norm import spec as gated_rms_norm
from .layer_norm import spec as layer_norm
from .qk_norm_rope import spec as qk_norm_rope
from .rms_norm import spec as rms_norm
from .rms_norm_backward import spec as rms_norm_backward
from .rms_norm_quant import spec as rms_norm_quant
from .seed import spec as seed
from .static_quant import spec as static_quant

# The op families, in the order every listing of ops follows.
_FAMILIES = (rms_norm, fused_add_rms_norm, rms_norm_backward, layer_norm, rms_norm_quant, static_quant, dynamic_quant,
             qk_norm_rope, gated_rms_norm, seed)

REGISTRY: dict[str, OpSpec] = {spec.name: spec for family in _FAMILIES for spec in family.SPECS}
NAMES: tuple[str, ...] = tuple(REGISTRY)


def get(name: str) -> OpSpec:
    """The spec of op ``name``; ValueError naming the ops there are."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {name!r}; allowed: {', '.join(NAMES)}") from None


def with_check(kind: str) -> tuple[str, ...]:
    """The ops whose cases a checker of ``kind`` runs (OpSpec.check: "row", "backward", "quant", ...)."""
    return tuple(name for name, spec in REGISTRY.items() if spec.check == kind)

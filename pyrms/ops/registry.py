"""The registry: one declaration (an ``OpSpec``) per op, written in its family's folder (``spec.py``).

Everything that enumerates ops iterates this registry instead of keeping a list of op names: the
precompile units (``pyrms.precompile``), the kernel inspection tool (``tools/ptx_dump.py``), the case
matrix, the randomized check and the sanitizer sweep (under ``tests/`` and ``tools/``). Adding an op is
its folder plus one entry in ``_FAMILIES`` below. Pure: importing it touches no GPU.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from .. import dtypes


@dataclass(frozen=True)
class Unit:
    """One NVRTC run: ``source`` compiled with the name expressions ``names``."""

    source: str
    names: tuple[str, ...]
    label: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.label or f"{self.source} ({len(self.names)} kernels)"


@dataclass(frozen=True)
class Inspect:
    """How ``tools/ptx_dump.py`` names an op's kernels: ``kind`` picks its variant grammar ("row": the row
    core's cache/few/aligned and the plan's flags; "backward", "quant", "seed"), ``planner(dtype, hidden)``
    gives the planned default, ``extra`` the variant switches beyond the plan's FLAGS (name: default)."""

    kind: str
    about: str
    planner: Callable | None = None
    extra: dict = field(default_factory=dict)
    weight: bool = False  # the row kinds: a weight=same|float32|none variant
    out: bool = True  # the row kinds: an out=same|float32 variant


@dataclass(frozen=True)
class OpSpec:
    """What every consumer needs to know about one op.

    ``name``: the public function (``pyrms.<name>``) or, for an entry point of another op's function, its
    own kernels' name (``rms_norm_nd``: rms_norm on N-D views). ``module``: the module holding the call
    (and the few-row threshold ``_FEW_ROWS`` that the tests can force). ``source``: its kernel file in
    ``cuda_src/``. ``flags``: the bool options that are kernel template flags (``unit`` takes them by
    name). ``option_sets(dtype)``: every option set that changes what compiles; ``unit(dtype, hidden,
    **options)``: the compile unit of one (ValueError where that shape cannot launch). ``hiddens``: the
    hidden sizes to enumerate units over (None: any, the precompile's list). ``inspect``: how
    tools/ptx_dump.py names its kernels (None: it has none of its own there). ``check``: which kind of
    checker runs its cases ("row", "backward", "quant", "seed"); ``operands(**layout)``: the case matrix's
    (row operands, vector operands) of a case; ``case_options``: the options a case may set.
    ``random``: whether the randomized check draws it."""

    name: str
    module: str
    source: str
    flags: tuple[str, ...]
    option_sets: Callable[[dtypes.DType], list[dict]]
    unit: Callable[..., Unit]
    inspect: Inspect | None
    check: str
    operands: Callable[..., tuple[tuple[str, ...], tuple[str, ...]]]
    case_options: tuple[str, ...]
    hiddens: tuple[int, ...] | None = None
    random: bool = False

    def unit_for(self, dtype, hidden: int, **options) -> Unit:
        """``unit`` after checking the option names: the flags (each True or False) and the op's other options."""
        flags = {name: bool(options.pop(name, False)) for name in self.flags}
        return self.unit(dtypes.get(dtype), hidden, **flags, **options)

    def flag_sets(self) -> list[dict]:
        """Every combination of the flags, each on or off, the first flag varying slowest."""
        import itertools

        return [dict(zip(self.flags, bits)) for bits in itertools.product((False, True), repeat=len(self.flags))]


# The op families, each a folder of pyrms/ops/ whose spec module declares SPECS (in this order everywhere).
_FAMILIES = ("rms_norm", "fused_add_rms_norm", "rms_norm_backward", "layer_norm", "rms_norm_quant", "seed")


def _load() -> dict[str, OpSpec]:
    specs: dict[str, OpSpec] = {}
    for family in _FAMILIES:
        for spec in importlib.import_module(f"{__package__}.{family}.spec").SPECS:
            specs[spec.name] = spec
    return specs


REGISTRY: dict[str, OpSpec] = _load()
NAMES: tuple[str, ...] = tuple(REGISTRY)


def get(name: str) -> OpSpec:
    """The spec of op ``name``; ValueError naming the ops there are."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {name!r}; allowed: {', '.join(NAMES)}") from None


def with_check(kind: str) -> tuple[str, ...]:
    """The ops whose cases a checker of ``kind`` runs ("row", "backward", "quant", "seed")."""
    return tuple(name for name, spec in REGISTRY.items() if spec.check == kind)

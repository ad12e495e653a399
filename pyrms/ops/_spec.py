"""The declaration of an op (``OpSpec``), what its compile units (``Unit``) and its kernels' inspection
(``Inspect``) are, and the vocabulary the families' declarations share. Each family's ``spec.py`` builds its
``SPECS`` from these; ``pyrms.ops.registry`` gathers them."""
from __future__ import annotations

import functools
import inspect
import itertools
from dataclasses import dataclass, field
from typing import Callable

from .. import dtypes
from . import _row_plan as plan


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
    gives the planned default, ``extra`` the variant switches beyond the plan's FLAGS (name: default),
    ``vectors`` the backward kinds' register-cached vector counts a variant may pick beside 0."""

    kind: str
    about: str
    planner: Callable | None = None
    extra: dict = field(default_factory=dict)
    weight: bool = False  # the row kinds: a weight=same|float32|none variant
    out: bool = True  # the row kinds: an out=same|float32 variant
    vectors: tuple[int, ...] = ()  # the backward kinds: vectors=0|... (beside 0, the plan's choices)


@dataclass(frozen=True)
class OpSpec:
    """What every consumer needs to know about one op.

    ``name``: the public function (``pyrms.<name>``) or, for an entry point of another op's function, its
    own kernels' name (an N-D entry point's ``<op>_nd``). ``module``: the module holding the call
    (and the few-row threshold ``_FEW_ROWS`` that the tests can force). ``source``: its kernel file in
    ``cuda_src/``; ``plan``: its plan class. ``own_flags``: the bool options that are kernel template flags
    (``unit`` takes them by name), where they are not the plan's FLAGS. ``option_sets(dtype)``: every option
    set that changes what compiles; ``unit(dtype, hidden, **options)``: the compile unit of one (ValueError
    where that shape cannot launch). ``hiddens``: the
    hidden sizes to enumerate units over (None: any, the precompile's list). ``inspect``: how
    tools/ptx_dump.py names its kernels (None: it has none of its own there). ``check``: which kind of
    checker runs its cases ("row", "backward", "quant", "static_quant", "dynamic_quant", "seed");
    ``operands(**layout)``: the case matrix's (row operands, vector operands) of a case; ``case_options``: the
    options a case may set.
    ``random``: whether the randomized check draws it. ``torch``: the module (in the op's folder) that binds it
    for PyTorch, imported by pyrms.torch only; ``bench``: the module that declares its benchmark problems
    (None: the op has none of its own); ``twin``: the module of its float64 reference and bit-exact twin, whose
    ``__all__`` pyrms.reference gathers. ``companions(dtype, hidden, **options)``: the other entries whose units
    a call of this op with these operands also launches (None: none), so that precompiling a model's calls
    compiles them too. ``model_calls(widths, options, weights, training)``: the (row width, options) of each
    call that a model's norms make of this op (pyrms.model_config.norm_calls), given the model's row widths (its
    hidden size first), its norm's options, the weight dtypes to cover and whether it trains; None: a model
    makes none."""

    name: str
    module: str
    source: str
    plan: type
    option_sets: Callable[[dtypes.DType], list[dict]]
    unit: Callable[..., Unit]
    inspect: Inspect | None
    check: str
    operands: Callable[..., tuple[tuple[str, ...], tuple[str, ...]]]
    case_options: tuple[str, ...]
    hiddens: tuple[int, ...] | None = None
    random: bool = False
    own_flags: tuple[str, ...] | None = None
    torch: str | None = None
    bench: str | None = None
    twin: str | None = None
    companions: Callable[..., tuple[str, ...]] | None = None
    model_calls: Callable[..., list[tuple[int, dict]]] | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """The bool options that are kernel template flags, in template order: the plan class's FLAGS, read
        when asked (a flag added to a plan is an option here too), unless the spec names its own."""
        return self.plan.FLAGS if self.own_flags is None else self.own_flags

    def unit_for(self, dtype, hidden: int, **options) -> Unit:
        """``unit`` after checking the options: the op's flags (each True or False) and the other options of
        UNIT_OPTIONS that its unit takes. Another of UNIT_OPTIONS may be given at its default (callers pass
        one option set to every op); TypeError for any other name, ValueError for one the op lacks set away
        from its default."""
        taken = self.unit_options
        passed = {name: bool(options.pop(name, False)) for name in self.flags}
        for name, value in options.items():
            if name in taken:
                passed[name] = value
            elif name not in UNIT_OPTIONS:
                raise TypeError(f"{self.name} has no option {name!r}; its flags: {', '.join(self.flags) or 'none'}")
            elif value != UNIT_OPTIONS[name]:
                raise ValueError(f"{self.name} has no {name}, got {name}={value!r}")
        return self.unit(dtypes.get(dtype), hidden, **passed)

    @property
    def unit_options(self) -> frozenset[str]:
        """The options beside the flags that ``unit`` takes (by keyword)."""
        return _parameters(self.unit)

    def flag_sets(self) -> list[dict]:
        """Every combination of the flags, each on or off, the first flag varying slowest."""
        return [dict(zip(self.flags, bits)) for bits in itertools.product((False, True), repeat=len(self.flags))]


# The options (beside the flags) that a spec's unit may take, at the value that means "not given": any op
# accepts each at this value (OpSpec.unit_for).
UNIT_OPTIONS = {"bias": True, "weight_dtype": None, "out_dtype": None, "grad_dtype": None, "mode": "static",
                "sum_precision": None, "residual_dtype": None}


@functools.lru_cache(maxsize=None)
def _parameters(function) -> frozenset[str]:
    """The keyword parameters of a spec's unit function."""
    return frozenset(name for name, p in inspect.signature(function).parameters.items() if p.kind is p.KEYWORD_ONLY)


# Options every case of a row op or backward may set (the case matrix's vocabulary).
COMMON_CASE_OPTIONS = ("epsilon", "pdl", "weight")


def mixed(dt: dtypes.DType) -> bool:
    """Whether fp32 weights and outputs may sit beside rows of ``dt`` (2-byte rows only)."""
    return dt is not dtypes.FLOAT32


def weight_options(dt: dtypes.DType) -> list:
    """The weight kinds a unit is compiled for: the rows' dtype (None), none, and float32 beside 2-byte rows."""
    return [None, "none"] + (["float32"] if mixed(dt) else [])


def out_options(dt: dtypes.DType) -> list:
    """The output kinds a unit is compiled for: the rows' dtype (None), and float32 beside 2-byte rows."""
    return [None] + (["float32"] if mixed(dt) else [])


def row_labels(dt: dtypes.DType, flags: dict, weight_dtype, out_dtype) -> tuple[str, str]:
    """(flags and weight, output) parts of a row unit's label: only what is not the default."""
    label = "".join(f" {name}" for name, value in flags.items() if value)
    if weight_dtype is not None:
        label += f" weight={weight_dtype}"
    return label, " out=float32" if plan.out_kind(dt, out_dtype) != "same" else ""


def row_operands(*, in_place=None, weight=True, **_):
    """(rows, vectors) of a normalizing row op with out beside input (or in place over it)."""
    return ("input",) if in_place else ("input", "out"), ("weight",) * weight

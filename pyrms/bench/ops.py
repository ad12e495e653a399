"""The benchmarked ops: each op's declaration (a ``Bench``) lives in its family's folder (``pyrms/ops/<family>/
bench.py``, named by the op's registry spec, ``OpSpec.bench``); this module defines what one declares and
finds them through the registry. Pure: no GPU, no PyTorch.

A declaration says what one call reads and writes, and so the bytes it must move: each input read once and
each output written once, the floor any kernel pays. The weight is counted once per call (every row reads
it, but after the first read it comes from L2). Scratch traffic an implementation adds (a backward's fp32
partial sums of dγ) is its own overhead and is not counted. It also names the op's implementations (pyrms's
and its points of comparison), its float64 reference, its call in the host-time section, its example
call for tools/profile_launch.py and its own targets (``Targets``; the cross-op ones are in targets.json).
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Callable

from ..ops import registry


@dataclass(frozen=True)
class HostOperands:
    """What an op's call in the host-time section may use: raw device addresses of five [tokens, hidden]
    arrays (x, r, y, dy, gx) and three [hidden] vectors with room for fp32 (w, bias, gw), all random data
    of ``dt``; ``device`` is the ordinal, ``stream`` the raw handle every call launches on."""

    tokens: int
    hidden: int
    dt: object
    device: int
    stream: int
    epsilon: float
    x: int
    r: int
    y: int
    dy: int
    gx: int
    w: int
    bias: int
    gw: int

    @property
    def common(self) -> dict:
        """The keywords every raw-int call takes: dtype and stream."""
        return dict(dtype=self.dt.name, stream=self.stream)


@dataclass(frozen=True)
class Example:
    """What an op's example call in tools/profile_launch.py may use: pyrms Tensors a, b, c ([rows, hidden],
    random), w and bias ([hidden], in [-1, 1]), dw ([hidden], empty), all of ``dt``; ``pdl``: whether to
    launch with programmatic dependent launch (an op that has no such switch ignores it)."""

    rows: int
    hidden: int
    dt: object
    a: object
    b: object
    c: object
    w: object
    bias: object
    dw: object
    pdl: bool


@dataclass(frozen=True)
class Targets:
    """One op's own targets, which pyrms.bench.targets judges (bf16; None or empty: no such target).

    ``ceiling``: at the extra-op shape (targets.json), pyrms at least this fraction of the copy ceiling for the
    op's own bytes. ``vs_eager``: (tokens, hidden) where pyrms without PDL is no slower than torch eager.
    ``host``: its call on raw ints in the host-time section (``Bench.host``) at most this many times its own
    bare cuLaunchKernel calls; ``host_extras``: variant of ``Bench.host_extras`` -> at most this many times
    the same bare calls. The headline op's bandwidth, decode and floor targets are targets.json's."""

    ceiling: float | None = None
    vs_eager: tuple[int, int] | None = None
    host: float | None = None
    host_extras: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Bench:
    """One op's benchmark declaration.

    The sweep's problem: ``inputs`` ([tokens, hidden] arrays only read, random data), ``inplace`` (read and
    overwritten), ``outputs`` (only written, poisoned before validation), ``vector_outputs`` ([hidden]
    outputs); ``row_terms`` and ``vector_terms`` the [tokens, hidden] arrays and [hidden] vectors one call
    moves; ``results`` the outputs validated; ``formula`` the byte count in words. ``impls``:
    implementation name -> factory(ctx, problem) -> Impl (empty: the sweep does not run the op);
    ``reference(problem, epsilon)`` -> (expected outputs by result name, notes). ``aliases``: other names
    ``--ops`` takes for it. ``headline``: the op the benchmark is about (one op): the full shape grid,
    the decode, floor and host targets; the others run at the extra-op shapes unless ``--ops`` names them.

    The host-time section: ``host(HostOperands)`` -> the op's call on raw ints (a function of no
    arguments, resolved before timing); ``host_extras(HostOperands, ctx)`` -> (more variants by name, notes
    for the JSON); ``host_labels``: variant name -> its label in the report.

    ``example(Example)`` -> one call for tools/profile_launch.py. ``targets``: its own targets."""

    name: str
    inputs: tuple[str, ...] = ()
    inplace: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    vector_outputs: tuple[str, ...] = ()
    row_terms: int = 0
    vector_terms: int = 0
    results: tuple[str, ...] = ()
    formula: str = ""
    impls: dict = field(default_factory=dict)
    reference: Callable | None = None
    aliases: tuple[str, ...] = ()
    headline: bool = False
    host: Callable | None = None
    host_extras: Callable | None = None
    host_labels: dict = field(default_factory=dict)
    example: Callable | None = None
    targets: Targets = field(default_factory=Targets)

    @property
    def host_variants(self) -> tuple[str, str]:
        """The host-time section's names of its call on raw ints and of that call's bare cuLaunchKernel calls:
        "pyrms" and "bare" for the headline op, "<op>" and "bare <op>" for the others."""
        return ("pyrms", "bare") if self.headline else (self.name, f"bare {self.name}")

    @property
    def arrays(self) -> tuple[str, ...]:
        """Every per-set [tokens, hidden] array."""
        return self.inputs + self.inplace + self.outputs

    def elements_moved(self, tokens: int, hidden: int) -> int:
        return self.row_terms * tokens * hidden + self.vector_terms * hidden

    def bytes_moved(self, tokens: int, hidden: int, itemsize: int) -> int:
        return self.elements_moved(tokens, hidden) * itemsize


@functools.lru_cache(maxsize=None)
def benches() -> dict[str, Bench]:
    """Every op's declaration, by op name, in the registry's order: from each spec's ``bench`` module,
    which declares ``BENCHES`` (its ops' declarations). Loaded when first asked (the modules import this one)."""
    found: dict[str, Bench] = {}
    for name, spec in registry.REGISTRY.items():
        if spec.bench is None:
            continue
        declared = {b.name: b for b in importlib.import_module(spec.bench).BENCHES}
        if name not in declared:
            raise LookupError(f"{spec.bench} declares no benchmark of {name} (BENCHES has {', '.join(declared)})")
        found[name] = declared[name]
    if [b.headline for b in found.values()].count(True) != 1:
        raise LookupError("exactly one op's benchmark must be the headline (Bench.headline)")
    return found


def swept() -> tuple[str, ...]:
    """The ops the shape sweep can run (those with implementations), in the registry's order."""
    return tuple(name for name, b in benches().items() if b.impls)


def headline() -> str:
    """The op the benchmark is about."""
    return next(name for name, b in benches().items() if b.headline)


def extras() -> tuple[str, ...]:
    """The swept ops besides the headline: by default they run at the extra-op shapes only."""
    return tuple(name for name in swept() if name != headline())


def aliases() -> dict[str, str]:
    """``--ops``'s other names: alias -> op."""
    return {alias: name for name in swept() for alias in benches()[name].aliases}


def get(name: str) -> Bench:
    """The declaration of swept op ``name``; ValueError naming the ops there are."""
    ops = swept()
    if name not in ops:
        raise ValueError(f"unknown op {name!r}; allowed: {', '.join(ops)}")
    return benches()[name]

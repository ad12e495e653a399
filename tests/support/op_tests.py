"""Each op's pieces of the shared checks, found through the registry: the module ``tests/ops/<family>/cases.py``
beside the op's tests, where ``<family>`` is the folder of the op's module (``OpSpec.module``), holds ``TESTS``,
an ``OpTests`` per op of the family. The checks under tests/support/ and tools/ take an op's piece from here and
never name the op, so an op added to the registry reaches them through its own folder's cases.py."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Iterable

from pyrms.ops import registry


@dataclass(frozen=True)
class RawCall:
    """The op's call for the lab tools that launch one case's operands many times (tests.support.raw_calls).

    ``outputs``: the operands it writes, in its call's order (the others it reads). ``launch(case, at,
    **common)``: one call on the operands by name ``at`` with the case's options, ``common`` holding the
    stream (and on raw pointers the dtype). ``twin(case, rows, phases)``: its outputs by name, bit for bit."""

    outputs: tuple[str, ...]
    launch: Callable[..., None]
    twin: Callable[..., dict]


@dataclass(frozen=True)
class OpTests:
    """One op's pieces. ``checker_call(case)``: (checker, its keyword arguments but rng and stream) that run a
    tests.support.case_matrix.Case of the op on the GPU (pure). The op's cases of the case matrix, each a
    tests.support.case_matrix.Case: ``sanitize(dtype)``, the sanitizer sweep's; ``gpu(dtype, axis)``, those of one
    of the GPU tests' axes (case_matrix.GPU_AXES; None: the op has no such tests); ``concurrency()``, the
    concurrency check's launches, taken in turn (None: it does not run the op). ``raw``: its RawCall, where a lab
    tool launches it (None: none does). ``centered``: whether the op subtracts each row's mean (LayerNorm's): a constant row
    at epsilon 0 is then 0 * inf, whose NaN bits differ between numpy and the GPU, so the randomized check draws
    epsilon 0 only for the others."""

    checker_call: Callable[..., tuple[Callable, dict]]
    sanitize: Callable[[str], Iterable]
    gpu: Callable[[str, str], Iterable] | None = None
    concurrency: Callable[[], Iterable] | None = None
    raw: RawCall | None = None
    centered: bool = False


def family(op: str) -> str:
    """The folder of op ``op``'s family, under pyrms/ops/ and tests/ops/ alike (ValueError for an unknown op)."""
    return registry.get(op).module.split(".")[2]


def of(op: str) -> OpTests:
    """Op ``op``'s pieces, from its family's tests/ops/<family>/cases.py (imported on first use: it imports the
    shared checks' modules, which import this one)."""
    module = importlib.import_module(f"tests.ops.{family(op)}.cases")
    return module.TESTS[op]

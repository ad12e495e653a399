"""Each op's call on a case's operands, its outputs and their twin, for the lab tools that launch the same
operands many times and check them afterwards (tools/soak.py, tools/concurrency_check.py): they take the op
of a tests.support.case_matrix case and never name one. The calls are the ops' own (OpTests.raw, in
tests/ops/<family>/cases.py); an op without one (OPS lists those with one) raises ValueError."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from pyrms.ops import registry
from tests.support import op_tests

# The ops with a raw call, in the registry's order.
OPS = tuple(name for name in registry.NAMES if op_tests.of(name).raw is not None)


def _raw(op: str) -> op_tests.RawCall:
    raw = op_tests.of(op).raw
    if raw is None:
        raise ValueError(f"no raw call of {op!r} here; the ops: {', '.join(OPS)}")
    return raw


def outputs(op: str) -> tuple[str, ...]:
    """The operands ``op`` writes, in its call's order; ValueError for an op without a call here."""
    return _raw(op).outputs


def launch(case, at: Mapping[str, object], stream=None) -> None:
    """One call of ``case``'s op in vLLM's order (out first) on its operands by name ``at``: device addresses
    (the raw-pointer fast path; the case's dtype says theirs) or pyrms Tensors (the general path), the case's
    rows, hidden size, epsilon, row strides and options, on ``stream`` (a raw handle, a pyrms.Stream or None)."""
    raw = _raw(case.op)
    on_pointers = isinstance(at[raw.outputs[0]], int)
    raw.launch(case, at, **(dict(dtype=case.dtype, stream=stream) if on_pointers else dict(stream=stream)))


def twin(case, rows: Mapping[str, np.ndarray], phases: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The case's outputs by name, as the kernel computes them bit for bit, from its inputs' values
    (``rows``: [rows, hidden] each, [1, hidden] for a vector) and each input's position inside its 16-byte
    vectors (``phases``: an int, or one per row; the weight's an int)."""
    return _raw(case.op).twin(case, rows, phases)

"""Seeded random cases for the randomized GPU check (``python -m tools.random_check``); pure, no GPU.

``draw_case(seed, index)`` draws one case from a numpy Generator seeded by (seed, index) alone, so
case i is the same whatever the count and can be redrawn on its own; ``draw_cases(seed, count)`` is
cases 0 .. count-1. A case names the op, dtype, rows, hidden size, every pointer's element offset
inside its 16-byte vector, every row stride, the options, in place, the stream and epsilon, and
``Case.line()`` / ``Case.from_line()`` turn it into one line of text and back, a repro that does not
depend on this generator staying the same. The cases are drawn in tests.support.case_matrix's vocabulary (its
operands, vector widths and dtypes), and ``Case.case`` is the matrix case that tests.support.testing.check_case
runs, as the GPU tests and the sanitizer sweep run theirs.

The distribution is shaped for a budget (5,000 cases in under three minutes on the H200, numpy twin
included): hidden sizes log-uniform over 1..300,000 plus the sizes where a plan changes, and row
counts capped by a total-element budget per tier, so most cases are small and a handful are near 16 M
elements (``TIERS``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from pyrms.ops import _row_plan as plan
from pyrms.ops import registry
from pyrms.ops._norm_backward import plan as bwd_plan
from tests.support import case_matrix, op_tests
from tests.support.case_matrix import operands, vector_elements

# The ops the randomized check draws: the registry's with random=True (in its order).
OPS = tuple(name for name, spec in registry.REGISTRY.items() if spec.random)
DTYPES = case_matrix.DTYPES
STREAMS = ("none", "stream", "handle")  # legacy default stream, a pyrms Stream, its raw handle
MAX_HIDDEN = 300_000
MAX_ELEMENTS = 1 << 24  # rows * hidden of any case
# (probability, element budget of rows * hidden, most rows): most cases small, a few big ones.
TIERS = ((0.93, 1 << 16, 4096), (0.068, 1 << 21, 1 << 17), (0.002, MAX_ELEMENTS, 1 << 17))
ROW_COUNTS = (1, 2, 3, 15, 16, 17, 31, 32, 33, 255, 256, 257)  # chunk (16) and few-rows (256) edges
EPSILONS = (1e-5, 1e-6, 1e-12, 1e-3, 0.1)


def _special_hiddens() -> tuple[int, ...]:
    """Hidden sizes next to where a plan changes (block, register cache, few-row spread, backward block, shared sums),
    for 2- and 4-byte dtypes, and common model widths: where off-by-one errors live."""
    edges = {1, 2, 3, 5, 7, 2048, 4096, 5120, 7168, 8192, 14336, 65536, MAX_HIDDEN}
    for vec in (8, 4):
        edges.update(32 * cache * vec for cache in plan.CACHE_CHOICES)
        edges.add(plan.max_threads(plan.CACHE_CHOICES[-1]) * plan.CACHE_CHOICES[-1] * vec)
        edges.update(plan.MAX_BLOCK // spread * plan.CACHE_CHOICES[-1] * vec for spread in (2, 4))
        edges.add(32 * bwd_plan.BACKWARD_VECTORS_PER_THREAD * vec)
        edges.add(bwd_plan.BACKWARD_MAX_BLOCK * bwd_plan.BACKWARD_VECTORS_PER_THREAD * vec)
    for params in (1, 2):  # the largest hidden whose column sums fit in shared memory
        edges.add(bwd_plan.SHARED_SUMS_LIMIT // (4 * params * 4) * 4 - 7)
    return tuple(sorted({h + d for h in edges for d in (-1, 0, 1) if 1 <= h + d <= MAX_HIDDEN}))


SPECIAL_HIDDENS = _special_hiddens()


@dataclass(frozen=True)
class Case:
    """One randomized check. offsets/strides: (operand, elements) pairs in operands() order; bias is
    the LayerNorm bias (forward) or grad_bias (backward); rms is RMSNorm with a bias (layer_norm's rms, with
    its bias; rms_norm_backward's grad_bias); in_place names the operand overwritten ('input' for rms_norm and
    layer_norm, 'grad_output' or 'input' for the backward passes)."""

    seed: int
    index: int
    op: str
    dtype: str
    rows: int
    hidden: int
    epsilon: float
    offsets: tuple[tuple[str, int], ...]
    strides: tuple[tuple[str, int], ...]
    stream: str = "none"
    in_place: str | None = None
    gemma: bool = False
    round_once: bool = False
    bias: bool = True
    grad_dtype: str | None = None
    rows_per_block: int | None = None
    own_workspace: bool = False
    rms: bool = False

    @property
    def elements(self) -> int:
        return self.rows * self.hidden

    @property
    def case(self) -> case_matrix.Case:
        """The case of the matrix this draws (tests.support.testing.check_case runs it); stream, seed and index
        aside."""
        options = {"epsilon": self.epsilon, "in_place": self.in_place}
        options.update((name, getattr(self, field)) for name, field in _MATRIX_OPTIONS
                       if name in registry.get(self.op).case_options)
        return case_matrix.case(self.op, self.dtype, self.rows, self.hidden, offsets=dict(self.offsets),
                                strides=dict(self.strides), **options)

    def line(self) -> str:
        """One line, ``key=value`` separated by spaces; Case.from_line(case.line()) == case."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in _CORE and value == f.default:
                continue  # options at their defaults are left out to keep the line short
            if isinstance(value, tuple):
                value = ",".join(f"{k}:{v}" for k, v in value) or "-"
            elif value is None:
                value = "-"
            elif isinstance(value, float):
                value = repr(value)
            parts.append(f"{f.name}={value}")
        return " ".join(parts)

    @classmethod
    def from_line(cls, line: str) -> "Case":
        """The case of a Case.line(); ValueError naming the token it cannot read."""
        kinds = {f.name: f.type for f in fields(cls)}
        values = {}
        for token in line.split():
            key, sep, text = token.partition("=")
            if not sep or key not in kinds:
                raise ValueError(f"cannot read {token!r}: expected key=value with a key among {sorted(kinds)}")
            values[key] = _parse(kinds[key], text)
        missing = sorted(_CORE - set(values))
        if missing:
            raise ValueError(f"line lacks {missing}: {line!r}")
        return cls(**values)


_CORE = {"seed", "index", "op", "dtype", "rows", "hidden", "epsilon", "offsets", "strides", "stream"}
# (the matrix's option, the Case field that gives it) for each op whose cases take that option: bias is LayerNorm's
# bias or its backward's grad_bias, rms layer_norm's rms or rms_norm_backward's grad_bias (rms_bias).
_MATRIX_OPTIONS = (("gemma", "gemma"), ("round_once", "round_once"), ("bias", "bias"), ("rms", "rms"),
                   ("grad_dtype", "grad_dtype"), ("rows_per_block", "rows_per_block"),
                   ("own_workspace", "own_workspace"), ("grad_bias", "bias"), ("rms_bias", "rms"))
# The features that name an option away from its default: (the matrix's option, value, feature).
_OPTION_FEATURES = (("bias", False, "bias=None"), ("grad_bias", False, "grad_bias=None"), ("rms", True, "rms"),
                    ("rms_bias", True, "grad_bias"))


def _parse(kind: str, text: str):
    if "tuple" in kind:
        return () if text == "-" else tuple((k, int(v)) for k, v in (p.split(":") for p in text.split(",")))
    if text == "-" and "None" in kind:
        return None
    if kind.startswith("bool"):
        if text not in ("True", "False"):
            raise ValueError(f"expected True or False, got {text!r}")
        return text == "True"
    if kind.startswith("int"):
        return int(text)
    if kind.startswith("float"):
        return float(text)
    return text


def _log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    """An int in [low, high], log-uniformly: as many draws from 1..10 as from 10,000..100,000."""
    return min(high, int(math.exp(rng.uniform(math.log(low), math.log(high + 1)))))


def _stride(rng: np.random.Generator, hidden: int, big: bool) -> int:
    """hidden (dense rows) half the time; else a longer row, never a multiple of 8 elements, so rows
    start at varying phases of the 16-byte vectors (at most 64 elements longer in the big tier)."""
    if rng.random() < 0.5:
        return hidden
    longest = 64 if big or rng.random() < 0.8 else max(64, hidden)
    stride = hidden + int(rng.integers(1, longest + 1))
    return stride + 1 if stride % 8 == 0 else stride


def draw_case(seed: int, index: int) -> Case:
    """Case `index` of `seed`: the same on every machine and whatever else is drawn."""
    if seed < 0 or index < 0:
        raise ValueError(f"seed and index must be >= 0, got seed={seed}, index={index}")
    rng = np.random.default_rng((seed, index))
    op = OPS[rng.integers(len(OPS))]
    dtype = DTYPES[rng.integers(len(DTYPES))]
    tier = int(rng.choice(len(TIERS), p=[t[0] for t in TIERS]))
    _, budget, most_rows = TIERS[tier]
    big = tier == len(TIERS) - 1
    if big:  # near the budget: long rows, as many as fit
        hidden = _log_uniform(rng, 1024, MAX_HIDDEN)
        rows = min(most_rows, budget // hidden)
    else:
        special = rng.random() < 0.2
        hidden = int(rng.choice(SPECIAL_HIDDENS)) if special else _log_uniform(rng, 1, MAX_HIDDEN)
        fit = max(1, min(most_rows, budget // hidden))
        edges = [r for r in ROW_COUNTS if r <= fit]
        rows = int(rng.choice(edges)) if rng.random() < 0.2 else _log_uniform(rng, 1, fit)
    # The options the op's cases take (its registry entry's case_options), each drawn in this order.
    takes = registry.get(op).case_options
    backward = op in case_matrix.BACKWARD
    options = {}
    if "gemma" in takes:
        options["gemma"] = bool(rng.random() < 0.3)
    if "round_once" in takes:
        options["round_once"] = bool(rng.random() < 0.3)
    if "bias" in takes or "grad_bias" in takes:
        options["bias"] = bool(rng.random() < 0.7)
    # RMSNorm with a bias: layer_norm's rms (beside a bias) and rms_norm_backward's grad_bias (without gemma)
    if ("rms" in takes and options["bias"]) or ("rms_bias" in takes and not options["gemma"]):
        options["rms"] = bool(rng.random() < 0.25)
    if "in_place" in takes and not backward and rng.random() < 0.25:
        options["in_place"] = "input"
    if backward:
        options["in_place"] = (None, "grad_output", "input")[rng.choice(3, p=[0.6, 0.2, 0.2])]
        options["grad_dtype"] = "float32" if rng.random() < 0.4 else None
        if rng.random() < 0.4:
            options["rows_per_block"] = bwd_plan.GRAD_CHUNK_ROWS * int(rng.choice((1, 2, 3, 4, 5, 8, 16, 64))) \
                if rng.random() < 0.7 else 1
        options["own_workspace"] = bool(rng.random() < 0.25)
    row_ops, vector_ops = operands(op, in_place=options.get("in_place"), bias=options.get("bias", True),
                                   rms_bias="rms_bias" in takes and options.get("rms", False))
    offsets = []
    aligned = rng.random() < 0.2  # every pointer on a 16-byte boundary, the common case in practice
    for name in (*row_ops, *vector_ops):
        vec = vector_elements(dtype, name, grad_dtype=options.get("grad_dtype"))
        offsets.append((name, 0 if aligned else int(rng.integers(vec))))
    strides = tuple((name, _stride(rng, hidden, big)) for name in row_ops)
    # ε = 0 only where no row can be constant: a constant row of a centered op (OpTests.centered) at ε = 0 is
    # 0 * inf, whose NaN bits differ between numpy and the GPU (a harness artefact, not a kernel fault).
    choices = EPSILONS + (() if op_tests.of(op).centered else (0.0,))
    epsilon = float(rng.choice(choices)) if rng.random() < 0.8 else float(10 ** rng.uniform(-8, -1))
    stream = STREAMS[rng.choice(3, p=[0.5, 0.25, 0.25])]
    return Case(seed, index, op, dtype, rows, hidden, epsilon, tuple(offsets), strides, stream, **options)


def draw_cases(seed: int, count: int, start: int = 0) -> list[Case]:
    """Cases start .. start+count-1 of `seed`."""
    return [draw_case(seed, i) for i in range(start, start + count)]


def features(case: Case) -> list[str]:
    """What a case exercises, as names to count: its op and dtype, each option away from its
    default, in place, the stream kind, misaligned pointers, strided rows, and its size class."""
    names = [f"op={case.op}", f"dtype={case.dtype}", f"stream={case.stream}"]
    names += [f"{name}" for name in ("gemma", "round_once", "own_workspace") if getattr(case, name)]
    names += [feature for name, value, feature in _OPTION_FEATURES if case.case.option(name) == value]
    if case.in_place:
        names.append(f"in_place={case.in_place}")
    if case.grad_dtype:
        names.append(f"grad_dtype={case.grad_dtype}")
    if case.rows_per_block:
        names.append("rows_per_block")
    if case.epsilon == 0.0:
        names.append("epsilon=0")
    if any(offset for _, offset in case.offsets):
        names.append("misaligned")
    if any(stride != case.hidden for _, stride in case.strides) and case.rows > 1:
        names.append("strided")
    names += [name for name, hit in (("rows=1", case.rows == 1), ("rows>256", case.rows > plan.FEW_ROWS),
                                     ("rows>65535", case.rows > 65535)) if hit]
    names.append("elements>4M" if case.elements > 1 << 22 else "elements>64K" if case.elements > 1 << 16 else
                 "elements<=64K")
    return names

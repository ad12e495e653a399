"""Every implementation's output checked against a float64 reference before it is timed.

Relative Frobenius error ||got - ref|| / ||ref|| over the validated rows (all rows up to 2^24
elements, else a sample that includes the first and last rows); NaN anywhere fails, and since outputs
are poisoned with NaN first, so does an unwritten element. Tolerances by storage dtype: two roundings
to bf16 give about 4e-3, to fp16 about 5e-4; fp32 arithmetic lands far under 1e-5.
"""
from __future__ import annotations

import numpy as np

TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def rel_error(got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; inf if ``got`` holds NaN or inf."""
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"shapes differ: got {got.shape}, reference {ref.shape}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    norm = np.linalg.norm(ref)
    diff = np.linalg.norm(got - ref)
    return float(diff / norm) if norm > 0 else float(diff)


class Expected:
    """The reference outputs of one Problem's set 0, computed once and shared by its implementations: the
    op's own reference (ops.Bench.reference, declared in its family's bench module)."""

    def __init__(self, problem, epsilon: float):
        reference = problem.op.reference
        if reference is None:
            raise ValueError(f"no reference for op {problem.op.name!r}")
        values, notes = reference(problem, epsilon)
        self.values, self.notes = values, list(notes)


def check(problem, impl, expected: Expected, synchronize) -> dict[str, float]:
    """Run ``impl`` once on set 0 (restored and poisoned first); the relative error of each output."""
    problem.reset_set0()
    impl.launch(0)
    synchronize()
    pointers = impl.results(0)
    errors = {}
    for name, ref in expected.values.items():
        ptr = pointers[name]
        if ref.ndim == 1:
            got = problem.download_vector(ptr, problem.hidden)
        else:
            got = problem.download_rows(ptr)
        errors[name] = rel_error(got, ref)
    problem.reset_set0()
    return errors


def passed(errors: dict[str, float], dtype: str) -> bool:
    return all(e < TOLERANCE[dtype] for e in errors.values())

"""Every implementation's output checked against a float64 reference before it is timed.

Relative Frobenius error ||got - ref|| / ||ref|| over the validated rows (all rows up to 2^24
elements, else a sample that includes the first and last rows); NaN anywhere fails, and since outputs
are poisoned with NaN first, so does an unwritten element. Tolerances by storage dtype: two roundings
to bf16 give about 4e-3, to fp16 about 5e-4; fp32 arithmetic lands far under 1e-5.
"""
from __future__ import annotations

import numpy as np

from ..ops.rms_norm.twin import rms_norm_ref

TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}
DW_FULL_LIMIT = 1 << 27  # dγ sums over all rows: checked where tokens x hidden is at most this
DW_CHUNK_ROWS = 2048


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


def fused_add_ref(x, r, w, epsilon, storage):
    """vLLM's fused_add_rms_norm: the sum rounded to the storage dtype, then normalized."""
    s = (np.asarray(x).astype(np.float64) + np.asarray(r).astype(np.float64)).astype(storage)
    return rms_norm_ref(s, w, epsilon), s.astype(np.float64)


def _inv_rms(x64, epsilon):
    return 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))


def backward_dx_ref(dy, x, w, epsilon):
    """dx = r * (w*dy - x̂ * mean(x̂ * w*dy)), x̂ = x*r, r = (mean(x²)+eps)^-1/2 (GUIDE.md §3)."""
    x64, dy64, w64 = (np.asarray(a).astype(np.float64) for a in (x, dy, w))
    r = _inv_rms(x64, epsilon)
    xhat = x64 * r
    g = dy64 * w64
    return r * (g - xhat * np.mean(xhat * g, axis=1, keepdims=True))


def backward_dw_partial(dy, x, epsilon):
    """Σ over the given rows of dy * x̂ (add the partials of all rows to get dγ)."""
    x64, dy64 = np.asarray(x).astype(np.float64), np.asarray(dy).astype(np.float64)
    return np.sum(dy64 * x64 * _inv_rms(x64, epsilon), axis=0)


class Expected:
    """The reference outputs of one Problem's set 0, computed once and shared by its implementations."""

    def __init__(self, problem, epsilon: float):
        self.notes: list[str] = []
        p, h, w = problem, problem.host, problem.host_weight
        name = p.op.name
        if name == "rms_norm":
            self.values = {"y": rms_norm_ref(h["x"], w, epsilon)}
        elif name == "fused_add_rms_norm":
            y, s = fused_add_ref(h["x"], h["r"], w, epsilon, p.dt.numpy)
            self.values = {"y": y, "r": s}
        elif name == "rms_norm_backward":
            self.values = {"dx": backward_dx_ref(h["dy"], h["x"], w, epsilon)}
            if p.tokens * p.hidden <= DW_FULL_LIMIT:
                dw = np.zeros(p.hidden)
                for first in range(0, p.tokens, DW_CHUNK_ROWS):
                    rows = range(first, min(p.tokens, first + DW_CHUNK_ROWS))
                    dw += backward_dw_partial(p.download_rows(p.ptr("dy", 0), rows),
                                              p.download_rows(p.ptr("x", 0), rows), epsilon)
                self.values["dw"] = dw
            else:
                self.notes.append(f"dγ not validated: tokens x hidden > {DW_FULL_LIMIT} (the float64 "
                                  "reference sums every row on the host)")
        else:
            raise ValueError(f"no reference for op {name!r}")


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

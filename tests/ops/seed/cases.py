"""The seed program's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands (within
a tolerance: the seed has no bit-exact twin) and the call that runs a case of the case matrix."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import dtypes
from pyrms.ops.rms_norm import twin as rms_twin
from tests.support.case_matrix import Case, case
from tests.support.op_tests import OpTests
from tests.support.testing import allocate, case_common, closing, run_checked


SEED_TOLERANCE = {"bfloat16": (1.6e-2, 1e-3), "float16": (2e-3, 1e-4), "float32": (1e-5, 1e-6)}  # (rtol, atol)


def check_seed(rng, dtype, rows, hidden, *, epsilon=1e-5, stream=None):
    """One seed_rms_norm launch on guarded operands: inputs and the output's guards bit for bit, the
    output's rows within SEED_TOLERANCE of the float64 reference (the seed uses rsqrtf, so no twin)."""
    from pyrms.ops.seed import seed_rms_norm

    dt = dtypes.get(dtype)
    x = allocate(rng, dt, rows, hidden, low=0.2, high=1.0)  # the seed program's input ranges
    w = allocate(rng, dt, 1, hidden, low=-0.02, high=0.5)
    out = allocate(rng, dt, rows, hidden, poison=True)
    with closing(x, w, out):
        label = f"seed {dt.name} rows={rows} hidden={hidden}"
        run_checked(label, lambda: seed_rms_norm(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, dtype=dt, stream=stream),
                    outputs={}, inputs={"input": x, "weight": w}, scratch={"out": out})
        got = out.device_values().astype(np.float64)
        want = rms_twin.rms_norm_ref(x.values(), w.values()[0], epsilon)
        rtol, atol = SEED_TOLERANCE[dt.name]
        bad = np.flatnonzero(~(np.abs(got - want) <= rtol * np.abs(want) + atol))
        if bad.size:
            raise AssertionError(f"{label}: {bad.size} outputs outside rtol={rtol} atol={atol}, first at flat "
                                 f"index {bad[:5]}: got {got.ravel()[bad[:5]]}, want {want.ravel()[bad[:5]]}")


def _checker_call(case) -> tuple:
    return check_seed, dict(case_common(case), rows=case.rows)


def _sanitize(dtype: str) -> Iterator[Case]:
    """The inputs the seed accepts: aligned, dense, hidden / VEC_SIZE <= 1024."""
    for hidden in (769, 4096):  # VEC_SIZE 1 (769 threads) and 8/8/4 (512/512/1024 threads)
        yield case("seed_rms_norm", dtype, 3, hidden)


TESTS = {"seed_rms_norm": OpTests(_checker_call, _sanitize)}

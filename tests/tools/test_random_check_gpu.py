"""A slice of the randomized check (python -m tools.random_check) in the one-process GPU suite: 300
seeded random cases over every op, each compared bit for bit with the numpy twin over guarded,
poisoned allocations. A failure prints each failing case's repro command."""
import pytest

from tests.support.random_cases import draw_cases
from tools.random_check import Streams, execute, run

pytestmark = pytest.mark.gpu

SEED, COUNT = 20261201, 300


def test_random_cases_are_bitwise_equal_to_the_twin():
    streams = Streams()
    try:
        summary = run(draw_cases(SEED, COUNT), run_one=lambda case: execute(case, streams), progress_every=0,
                      log=lambda *_: None)
    finally:
        streams.close()
    report = "\n".join(f"{f['repro']}\n  {f['error']}" for f in summary["failures"][:10])
    assert (summary["ran"], summary["failed"]) == (COUNT, 0), f"seed {SEED}: {summary['failed']} failed\n{report}"

#!/usr/bin/env python3
"""The rms_norm kernel matrix, small enough to run under compute-sanitizer.

Every dtype x every element misalignment of each pointer x hidden sizes with prefixes and
tails x strided rows x options x the kernels for few and for many rows, each launch checked bit for bit against the twin (pyrms.testing).
Prints the number of launches; exit status 1 if any check failed. Run it under each tool:

    compute-sanitizer --tool memcheck --error-exitcode 3 python -m tools.sanitize_matrix
    compute-sanitizer --tool racecheck --error-exitcode 3 python -m tools.sanitize_matrix --quick
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from pyrms import dtypes
from pyrms.testing import check_rms_norm


def cases(quick: bool):
    hiddens = (1, 7, 769, 5125) if quick else (1, 7, 9, 769, 5125, 16384, 65537)
    for dtype in dtypes.ALL:
        n = dtype.vec_elems
        for hidden in hiddens:
            for which, off, variant in itertools.product(("in_off", "w_off", "out_off"), range(n), ("few", "many")):
                yield dict(dtype=dtype, rows=2, hidden=hidden, variant=variant, **{which: off})
            yield dict(dtype=dtype, rows=3, hidden=hidden, in_stride=hidden + 3, out_stride=hidden + 5, in_off=1, out_off=2)
            yield dict(dtype=dtype, rows=2, hidden=hidden, gemma=True, round_once=True, w_off=n - 1)
            yield dict(dtype=dtype, rows=2, hidden=hidden, in_off=n - 1, in_place=True)
            yield dict(dtype=dtype, rows=2, hidden=hidden, in_off=n - 1, in_place=True, variant="many")


def run(label: str, checks) -> int:
    """Run (check, case) pairs, print each failure and a summary line; the exit status."""
    rng = np.random.default_rng(2026)
    launches = failures = 0
    start = time.time()
    for check, case in checks:
        launches += 1
        try:
            check(rng, **case)
        except AssertionError as exc:
            failures += 1
            print(f"FAIL {check.__name__} {case}: {exc}")
    print(f"{label}: {launches} launches checked, {failures} failed, {time.time() - start:.1f} s")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer hidden sizes (for the slower racecheck)")
    args = parser.parse_args()
    return run("sanitize_matrix", ((check_rms_norm, case) for case in cases(args.quick)))


if __name__ == "__main__":
    sys.exit(main())

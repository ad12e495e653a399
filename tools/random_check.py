"""The randomized GPU check: seeded random cases (tests.support.random_cases), each run through tests.support.testing's
checkers, which compare whole guarded, poisoned allocations bit for bit with the numpy twin.

    python -m tools.random_check --seed 2026 --count 5000 --precompile --out random_check.json
    python -m tools.random_check --case 'seed=2026 index=17 op=OP ...'   # one failure's repro line

Keeps going after a failure (a CUDA error stops the run: the context is unusable after one), prints
progress every --progress cases and a summary, and exits with status 1 if any case failed (2: no GPU).
--precompile first compiles every kernel the cases need into the disk cache, in parallel processes,
so the timed run measures checking, not NVRTC. --time-limit stops starting new cases after that
many seconds (the summary then says how many ran).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import platform
import sys
import time
from collections import Counter
from typing import Callable

import numpy as np

from pyrms.ops import registry
from tests.support.random_cases import Case, draw_case, draw_cases, features


def data_rng(case: Case) -> np.random.Generator:
    """The operands' values: from (seed, index) alone, apart from the generator that drew the case."""
    return np.random.default_rng((case.seed, case.index, 1))


class Streams:
    """The streams cases ask for, created at first use and reused: 'stream' passes a pyrms Stream
    (created blocking, so it orders after the checkers' synchronous uploads), 'handle' its raw handle."""

    def __init__(self) -> None:
        self._stream = None

    def get(self, kind: str):
        if kind == "none":
            return None
        if self._stream is None:
            from pyrms.driver import Stream

            self._stream = Stream()
        return self._stream if kind == "stream" else self._stream.handle

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def execute(case: Case, streams: Streams) -> None:
    """Run one case on the GPU; AssertionError names what differs."""
    from tests.support.testing import check_case

    check_case(data_rng(case), case.case, stream=streams.get(case.stream))


def compile_unit(case: Case) -> tuple[str, tuple[str, ...]]:
    """(source, name expressions compiled together) of the kernels a case launches: the disk cache
    entry its launch will look up (pyrms.launch.get_kernel compiles a plan's whole group)."""
    spec = registry.get(case.op)
    # the case's value of each option the op's unit takes (its flags, a backward's grad_dtype, RMSNorm with a bias's rms)
    taken = (*spec.flags, *spec.unit_options)
    unit = spec.unit_for(case.dtype, case.hidden, **{name: getattr(case, name) for name in taken if hasattr(case, name)})
    return unit.source, unit.names


def _compile(unit: tuple[str, tuple[str, ...]], arch: str) -> str:
    from pyrms import compiler

    return compiler.compile_source(unit[0], arch=arch, name_expressions=unit[1]).from_cache


def precompile(cases: list[Case], jobs: int, log=print) -> float:
    """Compile every unit the cases need into the disk cache, `jobs` processes at a time; seconds taken."""
    from pyrms import cache, compiler

    start = time.perf_counter()
    if not cache.enabled():
        log("precompile: skipped, PYRMS_DISABLE_CACHE is set (the compiles would be lost)")
        return 0.0
    arch = compiler.resolve_arch()  # asked here, once: the workers must not touch the GPU
    units = sorted({compile_unit(case) for case in cases})
    context = multiprocessing.get_context("spawn")  # no inherited CUDA context in the workers
    # By its import name: under python -m this module is __main__, which a spawned worker lacks.
    from tools import random_check as imported

    with concurrent.futures.ProcessPoolExecutor(max(1, min(jobs, len(units))), mp_context=context) as pool:
        origins = list(pool.map(imported._compile, units, [arch] * len(units)))
    seconds = time.perf_counter() - start
    log(f"precompile: {len(units)} compile units for {arch}, {origins.count('none')} compiled, "
        f"{len(units) - origins.count('none')} already cached, {seconds:.1f} s with {jobs} processes")
    return seconds


def repro(case: Case) -> str:
    return f"python -m tools.random_check --case '{case.line()}'"


def run(cases: list[Case], *, run_one: Callable[[Case], None], time_limit: float | None = None,
        progress_every: int = 250, log=print) -> dict:
    """Run cases in order through run_one (which raises on a difference), collecting failures.

    Returns the summary: seed(s), requested, ran, passed, failed, wall_s, stopped (why it stopped
    early, or None), elements (rows * hidden, summed) and max_elements, features (tests.support.random_cases.
    features counted), op_dtype (cases per op/dtype), slowest (the five slowest cases) and failures
    (index, case line, repro command, error)."""
    from pyrms.errors import CudaError, NoDriverError

    failures, seen, slowest = [], Counter(), []
    start = time.perf_counter()
    done, stop = 0, None
    for case in cases:
        if time_limit is not None and time.perf_counter() - start > time_limit:
            stop = f"time limit of {time_limit:g} s reached"
            break
        t0 = time.perf_counter()
        try:
            run_one(case)
        except (CudaError, NoDriverError) as exc:  # the context is gone: every later case would fail too
            failures.append(_failure(case, exc))
            stop = f"stopped by {type(exc).__name__} at case {case.index}"
            log(f"ABORT {repro(case)}\n  {type(exc).__name__}: {exc}")
            done += 1
            break
        except Exception as exc:  # AssertionError: a difference; anything else: a bug to see, not to stop on
            failures.append(_failure(case, exc))
            log(f"FAIL {repro(case)}\n  {type(exc).__name__}: {_short(exc)}")
        seconds = time.perf_counter() - t0
        slowest = sorted(slowest + [(seconds, case.line())], reverse=True)[:5]
        seen.update(features(case))
        done += 1
        if progress_every and done % progress_every == 0:
            log(f"random_check: {done}/{len(cases)} cases, {len(failures)} failed, {time.perf_counter() - start:.1f} s")
    return {
        "seed": sorted({c.seed for c in cases}), "requested": len(cases), "ran": done,
        "passed": done - len(failures), "failed": len(failures), "wall_s": round(time.perf_counter() - start, 3),
        "stopped": stop, "elements": sum(c.elements for c in cases[:done]),
        "max_elements": max((c.elements for c in cases[:done]), default=0),
        "features": dict(sorted(seen.items())),
        "op_dtype": dict(sorted(Counter(f"{c.op}/{c.dtype}" for c in cases[:done]).items())),
        "slowest": [{"s": round(s, 3), "case": line} for s, line in slowest], "failures": failures,
    }


def _short(exc: BaseException, limit: int = 600) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + " ..."


def _failure(case: Case, exc: BaseException) -> dict:
    return {"index": case.index, "case": case.line(), "repro": repro(case),
            "error": f"{type(exc).__name__}: {_short(exc)}"}


def _environment() -> dict:
    from pyrms import __version__, driver

    return {"pyrms": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "device": driver.get_device().name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.random_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--count", type=int, default=5000, help="cases to draw (default 5000)")
    parser.add_argument("--start", type=int, default=0, help="index of the first case (default 0)")
    parser.add_argument("--index", type=int, action="append", help="run only case INDEX of --seed (repeatable)")
    parser.add_argument("--case", action="append", help="run the case of a repro line (repeatable)")
    parser.add_argument("--time-limit", type=float, help="start no case after this many seconds")
    parser.add_argument("--progress", type=int, default=250, help="print progress every N cases (0: never)")
    parser.add_argument("--precompile", action="store_true", help="compile all needed kernels first, in parallel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for --precompile")
    parser.add_argument("--list", action="store_true", help="print the cases' lines and exit (no GPU)")
    parser.add_argument("--out", help="write the summary as JSON to this file")
    args = parser.parse_args(argv)
    if args.count < 0 or args.seed < 0 or args.start < 0:
        parser.error("--seed, --count and --start must be >= 0")
    if args.case:
        cases = [Case.from_line(line) for line in args.case]
    elif args.index:
        cases = [draw_case(args.seed, i) for i in args.index]
    else:
        cases = draw_cases(args.seed, args.count, args.start)
    if args.list:
        print("\n".join(case.line() for case in cases))
        return 0
    from pyrms import driver

    compile_s = precompile(cases, args.jobs) if args.precompile else None  # no GPU needed with $PYRMS_ARCH
    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"random_check: no usable CUDA GPU: {reason}", file=sys.stderr)
        return 2
    streams = Streams()
    try:
        summary = run(cases, run_one=lambda case: execute(case, streams), time_limit=args.time_limit,
                      progress_every=args.progress)
    finally:
        streams.close()
    summary.update(precompile_s=compile_s and round(compile_s, 1), environment=_environment(),
                   command=" ".join(["python -m tools.random_check", *(argv if argv is not None else sys.argv[1:])]))
    _print_summary(summary)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if summary["failed"] else 0


def _print_summary(s: dict) -> None:
    print("features: " + ", ".join(f"{k} {v}" for k, v in s["features"].items()))
    print("op/dtype: " + ", ".join(f"{k} {v}" for k, v in s["op_dtype"].items()))
    print("slowest: " + "; ".join(f"{x['s']:.2f} s {x['case']}" for x in s["slowest"][:3]))
    for failure in s["failures"]:
        print(f"failed: {failure['repro']}\n  {failure['error']}")
    stopped = f" ({s['stopped']})" if s["stopped"] else ""
    print(f"random_check: seed {','.join(map(str, s['seed']))}: {s['ran']} of {s['requested']} cases run{stopped}, "
          f"{s['passed']} passed, {s['failed']} failed, {s['elements'] / 1e6:.0f} M elements (largest "
          f"{s['max_elements']:,}), {s['wall_s']:.1f} s" + (f" after {s['precompile_s']} s of precompile"
                                                            if s["precompile_s"] is not None else ""))


if __name__ == "__main__":
    sys.exit(main())

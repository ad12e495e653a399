"""``python -m pyrms.precompile``: compile every kernel into the disk cache ahead of time.

A compile unit takes NVRTC 1 to 25 seconds on one core, so the first call of each op, dtype and option set
pays for a compile. This compiles all of them at once, in parallel processes, into the cache that
calls then read (``PYRMS_CACHE_DIR``, default ``$XDG_CACHE_HOME/pyrms`` or ``~/.cache/pyrms``).
Needs no GPU when the arch is given (``--arch sm_90`` or ``PYRMS_ARCH``); otherwise it asks the
GPU for its arch.

    python -m pyrms.precompile --arch sm_90            # every kernel, for an H100/H200
    python -m pyrms.precompile --ops OP --dtypes bf16  # one op (--help names them), one dtype
    python -m pyrms.precompile --list                  # what would be compiled
    python -m pyrms.precompile --arch sm_90 --cover    # a few units meeting every dtype and option (a quick check)

A compile unit is what ``pyrms.launch.get_kernel`` compiles in one NVRTC run: one source and every name
expression compiled with it (for an op on the row core, all launch shapes of one dtype and option set), so
hidden sizes share units. ``unit`` maps one call to its unit; ``every_unit`` enumerates them, and
tools/sanitize_all.py uses both for its own selection.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from . import dtypes
from .ops import registry
from .ops._spec import Unit
from .ops.seed import spec as seed_spec

OPS = registry.NAMES
# The units do not depend on the hidden size today (groups hold every launch shape); enumerating
# over sizes that reach every branch of the planners keeps every_unit complete if one ever does.
HIDDENS = (1, 7, 9, 255, 769, 1024, 4096, 5120, 5125, 8192, 16384, 32776, 65536, 65537)
SEED_HIDDENS = seed_spec.SEED_HIDDENS


def flags(op: str) -> tuple[str, ...]:
    """The option flags ``unit`` takes for ``op`` (each True or False)."""
    return registry.get(op).flags


def unit(op: str, dtype, hidden: int, **options) -> Unit:
    """The unit a call of ``op`` on rows of ``hidden`` elements compiles (the disk cache entry its
    launch looks up); ValueError for an op or a shape that cannot launch (the seed's limits).
    ``options``: the op's flags by name (``flags(op)``), each True or False, and its other options as its
    spec's ``unit`` takes them (weight_dtype, out_dtype, grad_dtype, mode, sum_precision, residual_dtype,
    bias); TypeError for one it does not have."""
    return registry.get(op).unit_for(dtype, hidden, **options)


def _candidates(ops: Iterable[str], dtype_list: Iterable, hiddens: Iterable[int],
                seed_hiddens: Iterable[int]) -> Iterator[tuple[str, dict, Unit]]:
    """(op, what selects the unit: dtype and options by name, unit) for every unit of ``ops`` (see every_unit),
    repeats included."""
    hiddens, dtype_list = tuple(hiddens), tuple(dtype_list)
    for spec in map(registry.get, ops):
        sizes = hiddens if spec.hiddens is None else tuple(seed_hiddens)
        for dt in map(dtypes.get, dtype_list):
            for hidden in sizes:
                for options in spec.option_sets(dt):
                    try:
                        u = spec.unit_for(dt, hidden, **options)
                    except ValueError:
                        if spec.hiddens is not None or options.get("mode") == "per_group":
                            continue
                        raise
                    yield spec.name, {"dtype": dt.name, **options}, u


def every_unit(ops: Iterable[str] = OPS, dtype_list: Iterable = dtypes.ALL, hiddens: Iterable[int] = HIDDENS,
               seed_hiddens: Iterable[int] = SEED_HIDDENS) -> list[Unit]:
    """Every unit of ``ops`` for ``dtype_list``, each once, sorted by label. An op compiled per hidden size
    (the seed) for ``seed_hiddens`` where it can launch (it cannot above 1024 threads, e.g. float32 at 5120);
    a per-group mode only where its group divides the hidden size."""
    found: dict[Unit, Unit] = {}
    for _, _, u in _candidates(ops, dtype_list, hiddens, seed_hiddens):
        found.setdefault(u, u)
    return sorted(found.values(), key=lambda u: (u.source, u.label))


def covering_units(ops: Iterable[str] = OPS, dtype_list: Iterable = dtypes.ALL, hiddens: Iterable[int] = HIDDENS,
                   seed_hiddens: Iterable[int] = SEED_HIDDENS) -> list[Unit]:
    """A few of ``every_unit``'s units in which each op meets every dtype and every value of each of its
    options at least once (chosen greedily: each pick the unit that adds the most op, option and value
    triples not met yet), sorted by label. Compiling them exercises every branch that a single dtype or
    option selects, in under a tenth of the units: the check of an NVRTC whose front end cannot run alone
    (-fdevice-syntax-only is NVRTC 12.4's), where compiling every unit would take too long."""
    offered: dict[Unit, set] = {}
    for op, selection, u in _candidates(ops, dtype_list, hiddens, seed_hiddens):
        offered.setdefault(u, set()).update((op, key, repr(value)) for key, value in selection.items())
    wanted = set().union(*offered.values())
    chosen: list[Unit] = []
    while wanted:
        best = max(offered, key=lambda u: (len(offered[u] & wanted), -len(u.names)))
        chosen.append(best)
        wanted -= offered.pop(best)
    return sorted(chosen, key=lambda u: (u.source, u.label))


# --- compiling ----------------------------------------------------------------------------------------


@dataclass
class Result:
    unit: Unit
    outcome: str  # "compiled", "cached" or "failed"
    seconds: float
    error: str = ""


def _compile_one(source: str, names: tuple[str, ...], arch: str) -> tuple[str, float, str]:
    """(outcome, seconds, error) of one unit; never raises, so that a worker's answer always pickles."""
    from . import compiler

    start = time.perf_counter()
    quiet = os.environ.get("PYRMS_QUIET")
    os.environ["PYRMS_QUIET"] = "1"  # the progress line says what the compiler would print
    try:
        program = compiler.compile_source(source, arch=arch, name_expressions=names)
    except Exception as exc:  # CompileError, HeaderNotFoundError, ...: reported, the others go on
        return "failed", time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
    finally:
        if quiet is None:
            del os.environ["PYRMS_QUIET"]
        else:
            os.environ["PYRMS_QUIET"] = quiet
    return ("compiled" if program.from_cache == "none" else "cached"), time.perf_counter() - start, ""


def compile_units(units: Sequence[Unit], arch: str, jobs: int = 1,
                  progress: Callable[[str], None] | None = print) -> list[Result]:
    """Compile ``units`` for ``arch`` into the disk cache, ``jobs`` NVRTC processes at a time (one:
    in this process), calling ``progress`` with one line per unit as it finishes, with an estimate of the
    time left once a unit has compiled."""
    results: list[Result] = []
    width = len(str(len(units)))
    start = time.perf_counter()

    def done(u: Unit, outcome: str, seconds: float, error: str) -> None:
        results.append(Result(u, outcome, seconds, error))
        if progress is not None:
            what = {"compiled": f"compiled in {seconds:.1f} s", "cached": "already cached"}.get(outcome, "FAILED")
            left = time_left(results, len(units), time.perf_counter() - start)
            progress(f"  [{len(results):>{width}}/{len(units)}] {u}: {what}" + (f"; {left}" if left else "")
                     + (f"\n    {error}" if error else ""))

    if jobs <= 1 or len(units) <= 1:
        for u in units:
            done(u, *_compile_one(u.source, u.names, arch))
        return results
    # spawn: the workers only run NVRTC and must not inherit a CUDA context.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(units)), mp_context=context) as pool:
        futures = {pool.submit(_compile_one, u.source, u.names, arch): u for u in units}
        for future in concurrent.futures.as_completed(futures):
            try:
                answer = future.result()
            except Exception as exc:  # a worker died (killed, out of memory)
                answer = ("failed", 0.0, f"{type(exc).__name__}: {exc}")
            done(futures[future], *answer)
    return results


def time_left(results: Sequence[Result], total: int, elapsed: float) -> str:
    """An estimate of the time the remaining units take ("about 3 min left"), from the wall time so far per
    unit done, which counts the parallel processes; "" before any unit compiled (hits of the cache take no
    time and tell nothing) and after the last."""
    remaining = total - len(results)
    if not remaining or not any(r.outcome == "compiled" for r in results):
        return ""
    seconds = elapsed / len(results) * remaining
    return f"about {seconds / 60:.0f} min left" if seconds >= 90 else f"about {seconds:.0f} s left"


def summary(results: Sequence[Result], arch: str, seconds: float, jobs: int) -> str:
    from . import cache

    counts = {k: sum(1 for r in results if r.outcome == k) for k in ("compiled", "cached", "failed")}
    return (f"precompile: {len(results)} compile units for {arch} ({counts['compiled']} compiled, "
            f"{counts['cached']} already cached, {counts['failed']} failed) in {seconds:.1f} s with {jobs} "
            f"processes; cache {cache.directory()}")


# --- the command --------------------------------------------------------------------------------------


def parse_ops(text: str) -> tuple[str, ...]:
    """An --ops argument: a comma list of OPS, or 'all' (argparse type; sanitize_all uses it too)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return OPS
    unknown = [n for n in names if n not in OPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown op(s) {unknown or text!r}; allowed: {', '.join(OPS)} or all")
    return tuple(op for op in OPS if op in names)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        sizes = ()
    if any(s < 1 for s in sizes) or (text.strip() and not sizes):
        raise argparse.ArgumentTypeError(f"expected a comma list of sizes >= 1 (or nothing), got {text!r}")
    return sizes


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    doc = (__doc__ or "").split(": ", 1)[1]
    parser = argparse.ArgumentParser(prog="python -m pyrms.precompile", description=doc.splitlines()[0],
                                     epilog="\n".join(doc.splitlines()[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", help="arch to compile for, e.g. sm_90 (default: $PYRMS_ARCH, else the GPU's)")
    parser.add_argument("--ops", type=parse_ops, default=OPS, help=f"comma list of {', '.join(OPS)} (default all)")
    parser.add_argument("--dtypes", type=dtypes.argument_list, default=dtypes.ALL,
                        help="comma list, e.g. bf16,fp16 (default bfloat16, float16, float32)")
    parser.add_argument("--seed-hidden", type=_sizes, default=SEED_HIDDENS, metavar="LIST",
                        help=f"hidden sizes for the seed kernel (default {','.join(map(str, SEED_HIDDENS))}, "
                             "the demo's; empty for none)")
    parser.add_argument("--jobs", type=_jobs, default=os.cpu_count() or 1,
                        help="NVRTC processes at a time (default: the CPU count)")
    parser.add_argument("--cover", action="store_true",
                        help="only a few units in which each op meets every dtype and option value (covering_units)")
    parser.add_argument("--list", action="store_true", help="print the compile units and exit (compiles nothing)")
    args = parser.parse_args(argv)
    units = (covering_units if args.cover else every_unit)(args.ops, args.dtypes, seed_hiddens=args.seed_hidden)
    if args.list:
        for u in units:
            print(f"{u}: {len(u.names)} kernel{'s' if len(u.names) != 1 else ''}")
        print(f"precompile: {len(units)} compile units")
        return 0

    from . import cache, compiler, errors

    if not cache.enabled():
        print("precompile: PYRMS_DISABLE_CACHE is set, so compiling ahead would be lost", file=sys.stderr)
        return 2
    try:
        arch = compiler.resolve_arch(args.arch)  # without --arch or PYRMS_ARCH: the GPU's, asked once, here
    except errors.NoDriverError as exc:
        print(f"precompile: no GPU to take the arch from ({exc}); pass --arch (e.g. --arch sm_90) or set "
              "PYRMS_ARCH", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
        return 2
    jobs = max(1, min(args.jobs, len(units)))
    print(f"precompile: {len(units)} compile units for {arch}, {jobs} processes, into {cache.directory()}", flush=True)
    start = time.time()
    results = compile_units(units, arch, jobs, progress=lambda line: print(line, flush=True))
    print(summary(results, arch, time.time() - start, jobs))
    return 1 if any(r.outcome == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

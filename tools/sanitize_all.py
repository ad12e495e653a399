#!/usr/bin/env python3
"""Every kernel of pyrms, checked launch by launch, small enough to run under compute-sanitizer.

The cases are tests.support.case_matrix.sanitize(family) for each family (pyrms.precompile.OPS): every dtype x
every element misalignment of every pointer x hidden sizes 1, 7, 9, 769, 5125, 16384 and 65537 x
strided rows, in place, the options and weight kinds, the kernels for few and for many rows; the N-D
entry point's views and packed short rows; the quantizing ops' output dtypes and modes; the seed kernel on the inputs it accepts (16-byte aligned, contiguous
rows, hidden / VEC_SIZE <= 1024). Each pyrms launch is compared bit for bit with its numpy twin over
whole guarded allocations (tests.support.testing.check_case); the seed kernel, which uses rsqrtf, with a
float64 reference under a tolerance, its guards bit for bit.

--quick keeps every hidden size, dtype, layout and kernel variant but only the misalignments 0, 1 and
VEC-1 (elements) of each pointer: half of the launches, for the slower tools. --precompile compiles
every kernel the selection needs in parallel processes, into the disk cache (PYRMS_CACHE_DIR), and
exits: run it once before the sanitizers so that no compile happens under them. --list prints the
selected cases, one a line (no GPU); --count their number per op.

    python -m tools.sanitize_all --precompile
    compute-sanitizer --tool memcheck --error-exitcode 3 python -m tools.sanitize_all
    compute-sanitizer --tool racecheck --error-exitcode 3 python -m tools.sanitize_all --quick

Prints "<op>: N launches checked, M failed" per op, then the total on the last line; exit status 1
if any check failed. tools/run_sanitizers.sh runs all four tools.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

import numpy as np

from pyrms import errors
from pyrms.ops import registry
from tests.support import case_matrix
from pyrms import precompile as precompile_mod
from tests.support.testing import check_case

OPS = precompile_mod.OPS
parse_ops = precompile_mod.parse_ops


def kernels_per_call(c: case_matrix.Case) -> int:
    """Kernel launches behind one checked op call: the backward passes are a rows kernel, then one
    column-sum kernel per parameter gradient written (the case's operands say which: dweight unless
    weight="none", dbias where the op has one and grad_bias is not False)."""
    if c.op in case_matrix.BACKWARD:
        return 1 + sum(name in ("grad_weight", "grad_bias") for name in case_matrix.pointers(c.op, **dict(c.options)))
    return 1


SLOW_SECONDS = 2.0  # --verbose names every case that takes longer


def select(ops, quick: bool, shard: tuple[int, int] = (0, 1)):
    """(family, case) of the families `ops`; with quick, only misalignments 0, 1 and VEC-1 of each
    pointer; of those, every shard[1]-th starting at shard[0] (interleaved, so shards mix ops and sizes
    alike)."""
    cases = ((op, c) for op in ops for c in case_matrix.sanitize(op, quick))
    for index, selected in enumerate(cases):
        if index % shard[1] == shard[0]:
            yield selected


# --- compiling ahead ----------------------------------------------------------------------------------


def compile_unit(family: str, c: case_matrix.Case) -> precompile_mod.Unit:
    """The unit (source and name expressions compiled together) a case of `family` launches: what
    pyrms.launch.get_kernel compiles, so the disk cache entry is the one the launch will look up."""
    weight = None if c.option("weight") in ("same", "ones") else c.option("weight")
    # out_dtype: the quantizing ops' output dtype, or the row ops' mixed-dtype output (out_kind)
    if family in case_matrix.QUANT:
        out_dtype = c.option("out_dtype")
    else:
        out_dtype = None if c.option("out_kind") == "same" else c.option("out_kind")
    # Only the options the op's unit takes: a case's option of the same name may be a launch's alone (dynamic_quant's
    # mode picks a kernel of its one unit); then its flags, one of which may share an option's name
    # (layer_norm_quant's bias).
    options = dict(bias=c.option("bias"), grad_dtype=c.option("grad_dtype"), weight_dtype=weight,
                   out_dtype=out_dtype, mode=c.option("mode"), sum_precision=c.option("sum_precision"),
                   residual_dtype=c.option("residual_dtype"))
    taken = registry.get(family).unit_options
    options = {name: value for name, value in options.items() if name in taken}
    options.update({name: c.option(name) for name in precompile_mod.flags(family)})
    return precompile_mod.unit(family, c.dtype, c.hidden, **options)


def precompile(ops, quick: bool, arch: str | None, jobs: int) -> int:
    """Compile every unit the selection needs, `jobs` NVRTC processes at a time (pyrms.precompile)."""
    from pyrms import cache, compiler

    if not cache.enabled():
        print("precompile: PYRMS_DISABLE_CACHE is set, so compiling ahead would be lost", file=sys.stderr)
        return 2
    arch = compiler.resolve_arch(arch)  # without --arch or PYRMS_ARCH: the GPU's, asked once, here
    units = sorted({compile_unit(op, c) for op, c in select(ops, quick)}, key=lambda u: (u.source, u.label))
    jobs = max(1, min(jobs, len(units)))
    start = time.time()
    results = precompile_mod.compile_units(units, arch, jobs, progress=lambda line: print(line, flush=True))
    print(precompile_mod.summary(results, arch, time.time() - start, jobs))
    return 1 if any(r.outcome == "failed" for r in results) else 0


# --- running ------------------------------------------------------------------------------------------


def run(ops, quick: bool, verbose: bool, shard: tuple[int, int] = (0, 1)) -> int:
    from pyrms import release_workspaces

    rng = np.random.default_rng(2026)
    checked, failed, seconds, kernel_launches = Counter(), Counter(), Counter(), Counter()
    aborted = None
    start = time.time()
    for op, case in select(ops, quick, shard):
        checked[op] += 1
        kernel_launches[op] += kernels_per_call(case)
        t0 = time.perf_counter()
        try:
            check_case(rng, case)
        except AssertionError as exc:
            failed[op] += 1
            print(f"FAIL {op} {case}: {exc}", flush=True)
        except (errors.CudaError, errors.NoDriverError) as exc:  # a sticky error, or no GPU: later launches would all fail
            failed[op] += 1
            aborted = f"{op} {case}: {type(exc).__name__}: {exc}"
            print(f"ABORT {aborted}", flush=True)
            break
        except Exception as exc:  # a bug in the case or the op: count it, keep going
            failed[op] += 1
            print(f"ERROR {op} {case}: {type(exc).__name__}: {exc}", flush=True)
        took = time.perf_counter() - t0
        seconds[op] += took
        if verbose:  # under a sanitizer that may be stopped by a timeout, this is all the log will say
            if took >= SLOW_SECONDS:
                print(f"  slow: {took:.1f} s {op} {case}", flush=True)
            if sum(checked.values()) % 25 == 0:
                done = ", ".join(f"{o} {checked[o]}" for o in ops if checked[o])
                print(f"  [{time.time() - start:.0f} s] {sum(checked.values())} launches: {done}", flush=True)
    if aborted is None:
        release_workspaces()
    for op in ops:
        if checked[op]:
            print(f"{op}: {checked[op]} launches checked, {failed[op]} failed "
                  f"({kernel_launches[op]} kernel launches, {seconds[op]:.1f} s)")
    total, total_failed = sum(checked.values()), sum(failed.values())
    kernels = sum(kernel_launches.values())
    if aborted:
        print(f"sanitize_all: aborted after a CUDA error at {aborted}")
    where = f", shard {shard[0]}/{shard[1]}" if shard[1] > 1 else ""
    print(f"sanitize_all: {total} launches checked, {total_failed} failed ({kernels} kernel launches, "
          f"{'quick' if quick else 'full'} matrix{where}, ops {','.join(ops)}, {time.time() - start:.1f} s)", flush=True)
    return 1 if total_failed or aborted else 0


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard must be K/N (e.g. 0/3), got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return index, count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--ops", type=parse_ops, default=OPS, help=f"comma list of {', '.join(OPS)} (default all)")
    parser.add_argument("--quick", action="store_true", help="misalignments 0, 1 and VEC-1 only (half of the launches)")
    parser.add_argument("--shard", type=parse_shard, default=(0, 1), metavar="K/N",
                        help="run only every N-th case starting at the K-th (0-based), to split a run over processes")
    parser.add_argument("--count", action="store_true", help="print the number of cases per op and exit (no GPU)")
    parser.add_argument("--list", action="store_true", help="print the selected cases, one a line, and exit (no GPU)")
    parser.add_argument("--precompile", action="store_true", help="compile every kernel needed into the disk cache, exit")
    parser.add_argument("--arch", help="arch for --precompile (default: $PYRMS_ARCH, else the GPU's)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="NVRTC processes for --precompile")
    parser.add_argument("--verbose", action="store_true",
                        help=f"progress every 25 launches, and every case slower than {SLOW_SECONDS:g} s")
    args = parser.parse_args(argv)
    if args.list:
        for op, case in select(args.ops, args.quick, args.shard):
            print(f"{op}: {case}")
        return 0
    if args.count:
        counts, kernel_counts = Counter(), Counter()
        selected = list(select(args.ops, args.quick, args.shard))
        for op, case in selected:
            counts[op] += 1
            kernel_counts[op] += kernels_per_call(case)
        units = {compile_unit(op, case) for op, case in selected}
        for op in args.ops:
            print(f"{op}: {counts[op]} launches ({kernel_counts[op]} kernel launches)")
        print(f"total: {sum(counts.values())} launches ({sum(kernel_counts.values())} kernel launches), "
              f"{len(units)} compile units")
        return 0
    if args.precompile:
        return precompile(args.ops, args.quick, args.arch, args.jobs)
    return run(args.ops, args.quick, args.verbose, args.shard)


if __name__ == "__main__":
    sys.exit(main())

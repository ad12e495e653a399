#!/usr/bin/env python3
"""Every kernel of pyrms, checked launch by launch, small enough to run under compute-sanitizer.

The matrices of tools/sanitize_matrix.py (rms_norm) and tools/sanitize_family.py (fused_add_rms_norm,
layer_norm and both backward passes), a few more layouts (strided LayerNorm, strided and in-place
backward passes) and the seed kernel on the inputs it accepts (16-byte aligned, contiguous rows,
hidden / VEC_SIZE <= 1024). Every dtype x every element misalignment of every pointer x hidden sizes
1, 7, 9, 769, 5125, 16384 and 65537 x strided rows. Each pyrms launch is compared bit for bit with its
numpy twin over whole guarded allocations (pyrms.testing); the seed kernel, which uses rsqrtf, with a
float64 reference under a tolerance, its guards bit for bit.

--quick keeps every hidden size, dtype, layout and kernel variant but only the misalignments 0, 1 and
VEC-1 (elements) of each pointer: half of the launches, for the slower tools. --precompile compiles
every kernel the selection needs in parallel processes, into the disk cache (PYRMS_CACHE_DIR), and
exits: run it once before the sanitizers so that no compile happens under them.

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

from pyrms import dtypes, errors, plan, reference
from pyrms import precompile as precompile_mod
from pyrms.testing import (allocate, check_fused_add_rms_norm, check_layer_norm, check_norm_backward,
                           check_rms_norm, check_rms_norm_nd, check_rms_norm_quant, run_checked)
from tools import sanitize_family, sanitize_matrix

OPS = precompile_mod.OPS
parse_ops = precompile_mod.parse_ops
def kernels_per_call(op: str, case: dict) -> int:
    """Kernel launches behind one checked op call: the backward passes are a rows kernel, then one
    column-sum kernel per parameter gradient written (dweight unless weight="none"; LayerNorm's dbias
    unless grad_bias=False)."""
    if op in ("rms_norm_backward", "layer_norm_backward"):
        weighted = case.get("weight", "same") != "none"
        return 1 + int(weighted) + int(op == "layer_norm_backward" and case.get("grad_bias", True))
    return 1


HIDDENS = (1, 7, 9, 769, 5125, 16384, 65537)
SLOW_SECONDS = 2.0  # --verbose names every case that takes longer
SEED_HIDDENS = (769, 4096)  # VEC_SIZE 1 (769 threads) and 8/8/4 (512/512/1024 threads)
SEED_TOLERANCE = {"bfloat16": (1.6e-2, 1e-3), "float16": (2e-3, 1e-4), "float32": (1e-5, 1e-6)}  # (rtol, atol)


# --- the cases: (op, check function, keyword arguments) --------------------------------------------


def _op_of(check, case) -> str:
    if check is check_norm_backward:
        return "layer_norm_backward" if case.get("layer_norm") else "rms_norm_backward"
    return {"check_fused_add_rms_norm": "fused_add_rms_norm", "check_layer_norm": "layer_norm"}[check.__name__]


def check_seed(rng, dtype, rows, hidden, epsilon=1e-5):
    """One seed_rms_norm launch on guarded operands: inputs and the output's guards bit for bit, the
    output's rows within SEED_TOLERANCE of the float64 reference (the seed uses rsqrtf)."""
    from pyrms.ops.seed import seed_rms_norm

    dt = dtypes.get(dtype)
    x = allocate(rng, dt, rows, hidden, low=0.2, high=1.0)  # the seed program's input ranges
    w = allocate(rng, dt, 1, hidden, low=-0.02, high=0.5)
    out = allocate(rng, dt, rows, hidden, poison=True)
    try:
        label = f"seed {dt.name} rows={rows} hidden={hidden}"
        run_checked(label, lambda: seed_rms_norm(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, dtype=dt),
                    outputs={}, inputs={"input": x, "weight": w}, scratch={"out": out})
        whole = out.download()
        got = np.stack([whole[out.index(r)] for r in range(rows)]).astype(np.float64)
        want = reference.rms_norm_ref(x.values(), w.values()[0], epsilon)
        rtol, atol = SEED_TOLERANCE[dt.name]
        bad = np.flatnonzero(~(np.abs(got - want) <= rtol * np.abs(want) + atol))
        if bad.size:
            raise AssertionError(f"{label}: {bad.size} outputs outside rtol={rtol} atol={atol}, first at flat "
                                 f"index {bad[:5]}: got {got.ravel()[bad[:5]]}, want {want.ravel()[bad[:5]]}")
    finally:
        for operand in (x, w, out):
            operand.close()


def extra_cases():
    """Layouts the two matrices do not cover: strided LayerNorm rows, strided and in-place backward
    passes with a partial last chunk of rows, LayerNorm's float32 parameter gradients, LayerNorm
    without bias (forward, and backward without grad_bias), programmatic dependent launch (pdl), the
    weight variants of rms_norm and fused add (no weight; an fp32 weight beside 2-byte rows), and both
    backward passes without a weight (LayerNorm's with and without grad_bias)."""
    for dtype in dtypes.ALL:
        n = dtype.vec_elems
        for hidden in HIDDENS:
            for weight in ("none",) if dtype is dtypes.FLOAT32 else ("none", "float32"):
                w_off = 3 if weight == "float32" else 0  # in the weight's own (fp32) elements
                for variant in ("few", "many"):
                    yield "rms_norm", check_rms_norm, dict(dtype=dtype, rows=3, hidden=hidden, in_off=n - 1, w_off=w_off,
                                                           out_off=1, weight=weight, variant=variant)
                    yield "fused_add_rms_norm", check_fused_add_rms_norm, dict(
                        dtype=dtype, rows=3, hidden=hidden, offsets={"input": 1, "residual": n - 1, "weight": w_off},
                        weight=weight, variant=variant)
            for variant in ("few", "many"):  # LayerNorm without a weight, with and without bias
                for bias in (True, False):
                    yield "layer_norm", check_layer_norm, dict(dtype=dtype, rows=3, hidden=hidden, weight="none", bias=bias,
                                                               offsets={"input": 1, "out": n - 1}, variant=variant)
            for variant in ("few", "many"):
                yield "rms_norm", check_rms_norm, dict(dtype=dtype, rows=3, hidden=hidden, in_off=1, variant=variant,
                                                       pdl=True)
                yield "fused_add_rms_norm", check_fused_add_rms_norm, dict(
                    dtype=dtype, rows=3, hidden=hidden, offsets={"residual": n - 1}, variant=variant, pdl=True)
                yield "layer_norm", check_layer_norm, dict(dtype=dtype, rows=3, hidden=hidden, variant=variant,
                                                           pdl=True)
            yield "rms_norm_backward", check_norm_backward, dict(dtype=dtype, rows=17, hidden=hidden, pdl=True)
            yield "layer_norm", check_layer_norm, dict(
                dtype=dtype, rows=3, hidden=hidden, offsets={"input": 1, "out": n - 1},
                strides={"input": hidden + 3, "out": hidden + 5})
            yield "layer_norm", check_layer_norm, dict(
                dtype=dtype, rows=3, hidden=hidden, bias=False, offsets={"input": n - 1, "weight": 1},
                strides={"out": hidden + 1})
            yield "layer_norm_backward", check_norm_backward, dict(
                dtype=dtype, rows=17, hidden=hidden, layer_norm=True, grad_bias=False,
                offsets={"grad_weight": 1, "input": n - 1})
            for layer_norm in (False, True):
                op = "layer_norm_backward" if layer_norm else "rms_norm_backward"
                yield op, check_norm_backward, dict(
                    dtype=dtype, rows=33, hidden=hidden, layer_norm=layer_norm, offsets={"grad_input": n - 1},
                    strides={"grad_input": hidden + 5, "grad_output": hidden + 2, "input": hidden + 1})
                yield op, check_norm_backward, dict(
                    dtype=dtype, rows=17, hidden=hidden, layer_norm=layer_norm, in_place="input",
                    offsets={"input": n - 1}, strides={"input": hidden + 3},
                    grad_dtype="float32" if layer_norm else None)
                for grad_bias in (True, False) if layer_norm else (False,):  # no weight: nothing summed, or dbias
                    yield op, check_norm_backward, dict(
                        dtype=dtype, rows=33, hidden=hidden, layer_norm=layer_norm, weight="none", grad_bias=grad_bias,
                        offsets={"grad_input": n - 1, "input": 1}, strides={"grad_output": hidden + 2})
                yield op, check_norm_backward, dict(dtype=dtype, rows=17, hidden=hidden, layer_norm=layer_norm,
                                                    weight="none", in_place="grad_output", offsets={"grad_output": 1},
                                                    own_workspace=True)


def nd_cases():
    """rms_norm's N-D kernel (rms_norm_nd_kernel): QKV-like slices, transposed views, in place, a weight
    per outer row, the weight kinds, and many short rows of a plain layout (packed, 8 to 32 lanes a row),
    each aligned (the ALIGNED packed variant where the layout allows) and misaligned."""
    for dtype in dtypes.ALL:
        n = dtype.vec_elems
        weights = ("none",) if dtype is dtypes.FLOAT32 else ("none", "float32")
        for hidden in (7, 64, 128, 130, 1000, 5125):
            row = 3 * hidden + 5  # a fused row: this slice's heads, then the others'
            for in_off, out_off in ((0, 0), (1, n - 1), (n - 1, 1)):
                yield "rms_norm_nd", check_rms_norm_nd, dict(dtype=dtype, sizes=(3, 2), hidden=hidden,
                                                             in_strides=(row, hidden), in_off=in_off, out_off=out_off,
                                                             w_off=in_off)
            yield "rms_norm_nd", check_rms_norm_nd, dict(dtype=dtype, sizes=(2, 3, 2), hidden=hidden,
                                                         in_strides=(6 * hidden, hidden, 3 * hidden), in_off=1)
            yield "rms_norm_nd", check_rms_norm_nd, dict(dtype=dtype, sizes=(3, 2), hidden=hidden,
                                                         in_strides=(row, hidden), in_off=n - 1, in_place=True)
            yield "rms_norm_nd", check_rms_norm_nd, dict(dtype=dtype, sizes=(3, 4), hidden=hidden, per_row=True,
                                                         w_stride=hidden + 1, w_off=1, in_off=1)
            for weight in weights:
                yield "rms_norm_nd", check_rms_norm_nd, dict(dtype=dtype, sizes=(3, 2), hidden=hidden,
                                                             in_strides=(row, hidden), in_off=1, weight=weight,
                                                             w_off=3 if weight == "float32" else 0)
        for hidden in (64, 128, 1000):
            for in_off, out_off in ((0, 0), (1, n - 1)):
                yield "rms_norm_nd", check_rms_norm, dict(dtype=dtype, rows=plan.FEW_ROWS + 3, hidden=hidden,
                                                          in_off=in_off, out_off=out_off)


def quant_cases():
    """rms_norm_quant and its fused add: every dtype, output dtype and mode; misalignments 0, 1 and VEC-1 of
    input, weight, residual and the output, one of the fp32 scales, NaN/inf rows, both launch shapes."""
    for fused in (False, True):
        op = "fused_add_rms_norm_quant" if fused else "rms_norm_quant"
        for dtype in dtypes.ALL:
            n = dtypes.get(dtype).vec_elems
            for out_dtype in dtypes.QUANTIZED:
                for mode in ("static", "per_token"):
                    for hidden in (7, 769, 5125):
                        for name in ("input", "weight", "out") + (("residual",) if fused else ()):
                            for off in (1, n - 1):
                                yield op, check_rms_norm_quant, dict(
                                    dtype=dtype, rows=3, hidden=hidden, out_dtype=out_dtype.name, mode=mode,
                                    fused=fused, offsets={name: off}, device_scale=mode == "static")
                    for variant in ("few", "many"):
                        yield op, check_rms_norm_quant, dict(
                            dtype=dtype, rows=5, hidden=16384, out_dtype=out_dtype.name, mode=mode, fused=fused,
                            offsets={"scale": 1}, strides={"input": 16387, "out": 16390}, specials=True,
                            variant=variant)


def mixed_cases():
    """Mixed dtypes beside 2-byte rows (docs/numerics.md): an fp32 output (offset 7: its 32-byte vector's
    last element) with each weight kind, LayerNorm's fp32 weight and bias with either output, in both shapes."""
    for dtype in (dtypes.BFLOAT16, dtypes.FLOAT16):
        n = dtype.vec_elems
        for hidden in HIDDENS:
            for variant in ("few", "many"):
                for weight in ("same", "float32", "none"):
                    w = {} if weight == "none" else {"weight": 1}
                    yield "rms_norm", check_rms_norm, dict(dtype=dtype, rows=3, hidden=hidden, in_off=n - 1,
                                                           w_off=w.get("weight", 0), out_off=7, weight=weight,
                                                           variant=variant, out_dtype="float32")
                    yield "layer_norm", check_layer_norm, dict(
                        dtype=dtype, rows=3, hidden=hidden, offsets={"input": 1, "out": 7, **w}, weight=weight,
                        variant=variant, out_dtype="float32")
                yield "fused_add_rms_norm", check_fused_add_rms_norm, dict(
                    dtype=dtype, rows=3, hidden=hidden, offsets={"input": 1, "residual": n - 1, "out": 7, "weight": 1},
                    strides={"out": hidden + 1}, weight="float32", variant=variant, out_dtype="float32")
                yield "layer_norm", check_layer_norm, dict(dtype=dtype, rows=3, hidden=hidden,
                                                           offsets={"out": n - 1, "bias": 1}, weight="float32",
                                                           variant=variant)


def seed_cases():
    for dtype in dtypes.ALL:
        for hidden in SEED_HIDDENS:
            yield "seed", check_seed, dict(dtype=dtype, rows=3, hidden=hidden)


def all_cases():
    """Every case of the full matrix, as (op, check, kwargs)."""
    for case in sanitize_matrix.cases(quick=False):
        yield "rms_norm", check_rms_norm, case
    for check, case in sanitize_family.cases(quick=False):
        yield _op_of(check, case), check, case
    yield from extra_cases()
    yield from mixed_cases()
    yield from nd_cases()
    yield from quant_cases()
    yield from seed_cases()


def _offsets(op: str, case: dict) -> list[int]:
    if op in ("rms_norm", "rms_norm_nd"):
        return [case.get(k, 0) for k in ("in_off", "w_off", "out_off")]
    return list((case.get("offsets") or {}).values())


def select(ops, quick: bool, shard: tuple[int, int] = (0, 1)):
    """The cases of `ops`; with quick, only misalignments 0, 1 and VEC-1 of each pointer; of those,
    every shard[1]-th starting at shard[0] (interleaved, so shards mix ops and sizes alike)."""
    index = 0
    for op, check, case in all_cases():
        if op not in ops:
            continue
        if quick:
            n = dtypes.get(case["dtype"]).vec_elems
            if any(off not in (0, 1, n - 1) for off in _offsets(op, case)):
                continue
        if index % shard[1] == shard[0]:
            yield op, check, case
        index += 1


# --- compiling ahead ----------------------------------------------------------------------------------


def compile_unit(op: str, case: dict) -> precompile_mod.Unit:
    """The unit (source and name expressions compiled together) a case launches: what
    pyrms.kernels.get compiles, so the disk cache entry is the one the launch will look up."""
    weight = None if case.get("weight", "same") in ("same", "ones") else case["weight"]
    return precompile_mod.unit(op, case["dtype"], case["hidden"], gemma=case.get("gemma", False),
                               round_once=case.get("round_once", False), bias=case.get("bias", True),
                               grad_dtype=case.get("grad_dtype"), weight_dtype=weight,
                               out_dtype=case.get("out_dtype"), mode=case.get("mode", "static"),
                               round_input=case.get("round_input", False))


def precompile(ops, quick: bool, arch: str | None, jobs: int) -> int:
    """Compile every unit the selection needs, `jobs` NVRTC processes at a time (pyrms.precompile)."""
    from pyrms import cache, compiler

    if not cache.enabled():
        print("precompile: PYRMS_DISABLE_CACHE is set, so compiling ahead would be lost", file=sys.stderr)
        return 2
    arch = compiler.resolve_arch(arch)  # without --arch or PYRMS_ARCH: the GPU's, asked once, here
    units = sorted({compile_unit(op, case) for op, _, case in select(ops, quick)}, key=lambda u: (u.source, u.label))
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
    for op, check, case in select(ops, quick, shard):
        checked[op] += 1
        kernel_launches[op] += kernels_per_call(op, case)
        t0 = time.perf_counter()
        try:
            check(rng, **case)
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
    parser.add_argument("--precompile", action="store_true", help="compile every kernel needed into the disk cache, exit")
    parser.add_argument("--arch", help="arch for --precompile (default: $PYRMS_ARCH, else the GPU's)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="NVRTC processes for --precompile")
    parser.add_argument("--verbose", action="store_true",
                        help=f"progress every 25 launches, and every case slower than {SLOW_SECONDS:g} s")
    args = parser.parse_args(argv)
    if args.count:
        counts, kernel_counts = Counter(), Counter()
        for op, _, case in select(args.ops, args.quick, args.shard):
            counts[op] += 1
            kernel_counts[op] += kernels_per_call(op, case)
        units = {compile_unit(op, case) for op, _, case in select(args.ops, args.quick, args.shard)}
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

"""``python -m pyrms.precompile``: compile every kernel into the disk cache ahead of time.

A cub kernel takes NVRTC about two seconds, so the first call of each op, dtype and option set
pays for a compile. This compiles all of them at once, in parallel processes, into the cache that
calls then read (``PYRMS_CACHE_DIR``, default ``$XDG_CACHE_HOME/pyrms`` or ``~/.cache/pyrms``).
Needs no GPU when the arch is given (``--arch sm_90`` or ``PYRMS_ARCH``); otherwise it asks the
GPU for its arch.

    python -m pyrms.precompile --arch sm_90            # every kernel, for an H100/H200
    python -m pyrms.precompile --ops rms_norm --dtypes bf16
    python -m pyrms.precompile --list                  # what would be compiled

A compile unit is what ``pyrms.kernels.get`` compiles in one NVRTC run: one source and every name
expression compiled with it (for rms_norm, all launch shapes of one dtype and option set), so
hidden sizes share units. ``unit`` maps one call to its unit; ``every_unit`` enumerates them, and
tools/sanitize_all.py uses both for its own selection.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from . import dtypes, plan

# rms_norm_nd: rms_norm's N-D views, weight per outer row and packed short rows (plan.RmsNormPlan.nd_group),
# which a plain rms_norm call of many short rows compiles too.
OPS = ("rms_norm", "rms_norm_nd", "fused_add_rms_norm", "rms_norm_backward", "layer_norm", "layer_norm_backward",
       "rms_norm_quant", "fused_add_rms_norm_quant", "seed")
# The units do not depend on the hidden size today (groups hold every launch shape); enumerating
# over sizes that reach every branch of the planners keeps every_unit complete if one ever does.
HIDDENS = (1, 7, 9, 255, 769, 1024, 4096, 5120, 5125, 8192, 16384, 32776, 65536, 65537)
# The seed kernel is compiled per hidden size (a template argument): the demo's default.
SEED_HIDDENS = (5120,)


@dataclass(frozen=True)
class Unit:
    """One NVRTC run: ``source`` compiled with the name expressions ``names``."""

    source: str
    names: tuple[str, ...]
    label: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.label or f"{self.source} ({len(self.names)} kernels)"


# The ops whose units have their plan's option flags (plan._RowPlan.FLAGS), each a unit of its own when on:
# what a flag added to a plan compiles is enumerated (_options), labelled and looked up from here. LayerNorm's
# one flag (bias) shares its unit; the RMSNorm backward's gemma is its own option (flags).
_FLAGGED = {"rms_norm": plan.RmsNormPlan, "rms_norm_nd": plan.RmsNormPlan, "fused_add_rms_norm": plan.RmsNormPlan,
            "rms_norm_quant": plan.RmsNormQuantPlan, "fused_add_rms_norm_quant": plan.RmsNormQuantPlan}


def flags(op: str) -> tuple[str, ...]:
    """The option flags ``unit`` takes for ``op`` (each True or False)."""
    return _FLAGGED[op].FLAGS if op in _FLAGGED else ("gemma",) if op == "rms_norm_backward" else ()


def unit(op: str, dtype, hidden: int, *, bias: bool = True, grad_dtype=None, weight_dtype=None, out_dtype=None,
         mode: str = "static", sum_precision: str | None = None, residual_dtype=None, **options: bool) -> Unit:
    """The unit a call of ``op`` on rows of ``hidden`` elements compiles (the disk cache entry its
    launch looks up); ValueError for an op or a shape that cannot launch (the seed's limits).
    ``options``: the op's flags by name (``flags(op)``: rms_norm's gemma and round_once, the quantizing ops'
    round_input and norm_out, the RMSNorm backward's gemma); TypeError for one it does not have.
    out_dtype, mode: the quantizing ops' (one unit per dtype, output dtype, mode and flags);
    sum_precision, residual_dtype: fused_add_rms_norm's (one unit per semantics and residual dtype);
    out_dtype for rms_norm, rms_norm_nd, fused_add_rms_norm and layer_norm: None or float32 (an fp32 output
    beside bf16/fp16 rows: a unit of its own per option set; fused add's with the rounded sum only)."""
    dt = dtypes.get(dtype)
    allowed = flags(op)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"{op} has no option {unknown[0]!r}; its flags: {', '.join(allowed) or 'none'}")
    options = {name: bool(options.get(name, False)) for name in allowed}
    on = "".join(f" {name}" for name, value in options.items() if value)  # the label's flags
    if op in ("rms_norm_quant", "fused_add_rms_norm_quant"):
        # per_group: one unit for both group sizes (a run-time argument); hidden sizes it does not divide have none
        q = plan.plan_rms_norm_quant(dt, hidden, out_dtype or dtypes.FLOAT8_E4M3FN, mode=mode,
                                     residual=op == "fused_add_rms_norm_quant",
                                     group=(128 if hidden % 128 == 0 else 64) if mode == "per_group" else None,
                                     **options)
        kernel = q.group_kernel if mode == "per_group" else q.kernel
        return Unit(q.source, tuple(q.group), f"{q.source} {kernel} {dt.name} {q.out_dtype.name} {mode}{on}")
    label = on
    if weight_dtype is not None:
        label += f" weight={weight_dtype}"
    outs = ""  # the label's output kind, where it is not the rows' dtype
    if op in ("rms_norm", "rms_norm_nd", "fused_add_rms_norm", "layer_norm"):
        if plan.out_kind(dt, out_dtype) != "same":
            outs = " out=float32"
    elif out_dtype is not None:
        raise ValueError(f"{op} has no out_dtype, got out_dtype={out_dtype!r}")
    p: plan.RmsNormPlan | plan.FusedAddRmsNormPlan | plan.LayerNormPlan | plan.NormBackwardPlan
    if op in ("rms_norm", "rms_norm_nd"):
        p = plan.plan_rms_norm(dt, hidden, weight_dtype=weight_dtype, out_dtype=out_dtype, **options)
        if op == "rms_norm_nd":
            return Unit(p.source, p.nd_group, f"{p.source} {dt.name} nd{label}{outs}")
    elif op == "fused_add_rms_norm":
        p = plan.plan_fused_add_rms_norm(dt, hidden, weight_dtype=weight_dtype, sum_precision=sum_precision,
                                         residual_dtype=residual_dtype, out_dtype=out_dtype, **options)
        if p.sum_precision == "fp32":
            label += " fp32_sum" + (" residual=float32" if p.fp32_residual else "")
    elif op == "layer_norm":
        p = plan.plan_layer_norm(dt, hidden, bias=bias, weight=weight_dtype != "none",
                                 weight_dtype=None if weight_dtype == "none" else weight_dtype, out_dtype=out_dtype)
        # one unit per dtype: with and without bias, forward and backward; one without a weight; and the
        # mixed ones (fp32 weight and bias, fp32 output: the forward only)
        label = "" if p.weight == "same" else f" weight={p.weight}"
    elif op in ("rms_norm_backward", "layer_norm_backward"):
        if weight_dtype not in (None, "none"):
            raise ValueError(f"{op}'s weight is of the dtype or none, got weight_dtype={weight_dtype!r}")
        p = plan.plan_norm_backward(dt, hidden, layer_norm=op == "layer_norm_backward",
                                    grad_dtype=grad_dtype, weight=weight_dtype is None, **options)
        # one unit per dtype: every option, both gradient dtypes; and one without a weight (LayerNorm's is
        # layer_norm's unit without a weight, forward and backward)
        label = "" if weight_dtype is None else " weight=none"
    elif op == "seed":
        from .ops.seed import plan_seed

        s = plan_seed(dt, hidden)
        return Unit(s.source, (s.expression,), f"{s.source} {dt.name} hidden {hidden}")
    else:
        raise ValueError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")
    return Unit(p.source, tuple(p.group), f"{p.source} {dt.name}{label}{outs}")


def _options(op: str, dt: dtypes.DType) -> list[dict]:
    """Every option set of ``op`` on rows of ``dt`` that can change what it compiles."""
    mixed = dt is not dtypes.FLOAT32  # fp32 weights and outputs beside 2-byte rows
    weights = [None, "none"] + (["float32"] if mixed else [])
    outs = [None] + (["float32"] if mixed else [])
    if op in ("rms_norm", "rms_norm_nd", "fused_add_rms_norm"):
        rows = [dict(weight_dtype=w, out_dtype=o, **f) for o in outs for w in weights for f in _flag_sets(op)
                if not (f["gemma"] and w == "none")]  # Gemma's 1 + w needs a weight
        if op != "fused_add_rms_norm" or dt is dtypes.FLOAT32:  # float32's sum is never rounded: one semantics
            return rows
        # the fp32 sum writes over the input: no fp32 output of its own (plan_fused_add_rms_norm)
        sums = [dict(sum_precision="rounded"), dict(sum_precision="fp32"), dict(residual_dtype="float32")]
        return [{**options, **s} for s in sums for options in rows
                if options["out_dtype"] is None or s == dict(sum_precision="rounded")]
    if op == "layer_norm":
        return [dict(bias=b, weight_dtype=w, out_dtype=o) for o in outs for w in weights for b in (True, False)]
    if op == "rms_norm_backward":
        return [dict(gemma=g, grad_dtype=d) for g in (False, True) for d in (None, "float32")] + [
            dict(weight_dtype="none")]
    if op == "layer_norm_backward":
        return [dict(grad_dtype=d, weight_dtype=w) for d in (None, "float32") for w in (None, "none")]
    if op in ("rms_norm_quant", "fused_add_rms_norm_quant"):
        return [dict(out_dtype=q, mode=m, **f) for q in dtypes.QUANTIZED for m in plan.QUANT_MODES
                for f in _flag_sets(op)]
    return [{}]


def _flag_sets(op: str) -> list[dict]:
    """Every combination of ``op``'s flags (``flags``), each on or off, the first flag varying slowest."""
    return [dict(zip(flags(op), bits)) for bits in itertools.product((False, True), repeat=len(flags(op)))]


def every_unit(ops: Iterable[str] = OPS, dtype_list: Iterable = dtypes.ALL, hiddens: Iterable[int] = HIDDENS,
               seed_hiddens: Iterable[int] = SEED_HIDDENS) -> list[Unit]:
    """Every unit of ``ops`` for ``dtype_list``, each once, sorted by label. The seed kernel for
    ``seed_hiddens`` where it can launch (it cannot above 1024 threads, e.g. float32 at 5120)."""
    found: dict[Unit, Unit] = {}
    for op in ops:
        for dt in map(dtypes.get, dtype_list):
            for hidden in (seed_hiddens if op == "seed" else hiddens):
                for options in _options(op, dt):
                    try:
                        u = unit(op, dt, hidden, **options)
                    except ValueError:
                        if op == "seed" or options.get("mode") == "per_group":
                            continue
                        raise
                    found.setdefault(u, u)
    return sorted(found.values(), key=lambda u: (u.source, u.label))


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
    in this process), calling ``progress`` with one line per unit as it finishes."""
    results: list[Result] = []
    width = len(str(len(units)))

    def done(u: Unit, outcome: str, seconds: float, error: str) -> None:
        results.append(Result(u, outcome, seconds, error))
        if progress is not None:
            what = {"compiled": f"compiled in {seconds:.1f} s", "cached": "already cached"}.get(outcome, "FAILED")
            progress(f"  [{len(results):>{width}}/{len(units)}] {u}: {what}" + (f"\n    {error}" if error else ""))

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
    parser.add_argument("--list", action="store_true", help="print the compile units and exit (compiles nothing)")
    args = parser.parse_args(argv)
    units = every_unit(args.ops, args.dtypes, seed_hiddens=args.seed_hidden)
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

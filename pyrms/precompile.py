"""``python -m pyrms.precompile``: compile every kernel into the disk cache ahead of time.

A compile unit takes NVRTC 1 to 25 seconds on one core, so the first call of each op, dtype and option set
pays for a compile. This compiles all of them at once, in parallel processes, into the cache that
calls then read (``PYRMS_CACHE_DIR``, default ``$XDG_CACHE_HOME/pyrms`` or ``~/.cache/pyrms``).
Needs no GPU when the arch is given (``--arch sm_90`` or ``PYRMS_ARCH``); otherwise it asks the
GPU for its arch.

    python -m pyrms.precompile --arch sm_90                 # every kernel, for an H100/H200
    python -m pyrms.precompile --ops OP --dtypes bf16       # one op (--help names them), one dtype
    python -m pyrms.precompile --model config.json          # the norms of a Hugging Face model (--training: backward)
    python -m pyrms.precompile --list                       # what would be compiled

Progress goes to stderr, a line per unit with the time so far and an estimate of the time left
(``PYRMS_QUIET=1``: none, only failures); the summary to stdout.

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
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import dtypes, model_config
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


def every_unit(ops: Iterable[str] = OPS, dtype_list: Iterable = dtypes.ALL, hiddens: Iterable[int] = HIDDENS,
               seed_hiddens: Iterable[int] = SEED_HIDDENS) -> list[Unit]:
    """Every unit of ``ops`` for ``dtype_list``, each once, sorted by label. An op compiled per hidden size
    (the seed) for ``seed_hiddens`` where it can launch (it cannot above 1024 threads, e.g. float32 at 5120);
    a per-group mode only where its group divides the hidden size."""
    found: dict[Unit, Unit] = {}
    hiddens = tuple(hiddens)
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
                    found.setdefault(u, u)
    return sorted(found.values(), key=lambda u: (u.source, u.label))


def _template_arguments(expression: str) -> set[tuple]:
    """(template,) and (template, position, argument) of each top-level template argument of a name expression
    ("pyrms::k<float, Vec<float, 4>, true>": pyrms::k with float at 0, Vec<float, 4> at 1, true at 2)."""
    name, _, rest = expression.partition("<")
    found: set[tuple] = {(name,)}
    depth, start, position = 0, 0, 0
    for i, ch in enumerate(rest[:-1]):  # the last character closes the argument list
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            found.add((name, position, rest[start:i].strip()))
            start, position = i + 1, position + 1
    if rest:
        found.add((name, position, rest[start:-1].strip()))
    return found


def cover(units: Sequence[Unit]) -> list[Unit]:
    """A few of ``units`` that together instantiate every kernel template of them with every value each of its
    template arguments takes there (dtypes, flags, shapes): chosen greedily, the unit adding most first (ties: the
    fewer kernels, then the earlier); about 50 of the 440 of every_unit. Sorted by label."""
    left = set().union(*(_template_arguments(e) for u in units for e in u.names)) if units else set()
    covered = {u: set().union(*map(_template_arguments, u.names)) for u in units}
    chosen: list[Unit] = []
    while left:
        best = max(units, key=lambda u: (len(covered[u] & left), -len(u.names)))
        chosen.append(best)
        left -= covered[best]
    return sorted(chosen, key=lambda u: (u.source, u.label))


# --- compiling ----------------------------------------------------------------------------------------


@dataclass
class Result:
    unit: Unit
    outcome: str  # "compiled", "cached", "checked" (syntax only) or "failed"
    seconds: float
    error: str = ""


# NVRTC's front end only: parsing and template instantiation, where an older NVRTC rejects code a newer accepts.
SYNTAX_ONLY = ("-fdevice-syntax-only",)
SYNTAX_ONLY_NVRTC = (12, 4)  # the first NVRTC that has the option (12.0 to 12.3 reject it as an invalid option)


def check_syntax_only() -> None:
    """ValueError, naming this NVRTC and the first that can, where NVRTC cannot run its front end alone."""
    from . import compiler

    found = compiler.nvrtc_version()
    if found < SYNTAX_ONLY_NVRTC:
        raise ValueError(f"a syntax-only run needs NVRTC {'.'.join(map(str, SYNTAX_ONLY_NVRTC))} or later (its "
                         f"{SYNTAX_ONLY[0]}), and this NVRTC is {'.'.join(map(str, found))}: compile fully instead")


def _compile_one(source: str, names: tuple[str, ...], arch: str, syntax_only: bool = False) -> tuple[str, float, str]:
    """(outcome, seconds, error) of one unit, or of its front end only (nothing cached: there is no CUBIN);
    never raises, so that a worker's answer always pickles."""
    from . import compiler

    start = time.perf_counter()
    quiet = os.environ.get("PYRMS_QUIET")
    os.environ["PYRMS_QUIET"] = "1"  # the progress line says what the compiler would print
    try:
        program = compiler.compile_source(source, arch=arch, name_expressions=names,
                                          **({"options": SYNTAX_ONLY, "use_cache": False} if syntax_only else {}))
    except Exception as exc:  # CompileError, HeaderNotFoundError, ...: reported, the others go on
        return "failed", time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
    finally:
        if quiet is None:
            del os.environ["PYRMS_QUIET"]
        else:
            os.environ["PYRMS_QUIET"] = quiet
    outcome = "checked" if syntax_only else "compiled" if program.from_cache == "none" else "cached"
    return outcome, time.perf_counter() - start, ""


def compile_units(units: Sequence[Unit], arch: str, jobs: int = 1,
                  progress: Callable[[str], None] | None = print, syntax_only: bool = False) -> list[Result]:
    """Compile ``units`` for ``arch`` into the disk cache (``syntax_only``: through NVRTC's front end only,
    nothing cached), ``jobs`` NVRTC processes at a time (one: in this process), calling ``progress`` with one
    line per unit as it finishes: units done of all, the wall time so far and, once a unit has compiled, an
    estimate of the time left. ValueError (check_syntax_only's) for ``syntax_only`` with an NVRTC before 12.4."""
    if syntax_only:
        check_syntax_only()
    results: list[Result] = []
    width = len(str(len(units)))
    start = time.perf_counter()

    def done(u: Unit, outcome: str, seconds: float, error: str) -> None:
        results.append(Result(u, outcome, seconds, error))
        if progress is not None:
            what = {"compiled": f"compiled in {seconds:.1f} s", "checked": f"front end passed in {seconds:.1f} s",
                    "cached": "already cached"}.get(outcome, "FAILED")
            elapsed = time.perf_counter() - start
            left = time_left(results, len(units), elapsed)
            progress(f"  [{len(results):>{width}}/{len(units)}] {u}: {what}; {clock(elapsed)} elapsed"
                     + (f", {left}" if left else "") + (f"\n    {error}" if error else ""))

    if jobs <= 1 or len(units) <= 1:
        for u in units:
            done(u, *_compile_one(u.source, u.names, arch, syntax_only))
        return results
    # spawn: the workers only run NVRTC and must not inherit a CUDA context.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(units)), mp_context=context) as pool:
        futures = {pool.submit(_compile_one, u.source, u.names, arch, syntax_only): u for u in units}
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
    if not remaining or not any(r.outcome in ("compiled", "checked") for r in results):
        return ""
    seconds = elapsed / len(results) * remaining
    return f"about {seconds / 60:.0f} min left" if seconds >= 90 else f"about {max(1, round(seconds))} s left"


def clock(seconds: float) -> str:
    """``seconds`` as m:ss (h:mm:ss from an hour on)."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def model_units(model: model_config.ModelNorms, dtype_list: Iterable, training: bool = False) -> list[Unit]:
    """The units of every norm call of ``model`` (``model_config.norm_calls``) in each dtype, with those of the
    entries each call also launches (its spec's companions), sorted by label."""
    found: dict[Unit, Unit] = {}
    for dt in map(dtypes.get, dtype_list):
        for op, width, options in model_config.norm_calls(model, dt, training):
            companions = registry.get(op).companions
            for name in (op, *(companions(dt, width, **options) if companions else ())):
                u = unit(name, dt, width, **options)
                found.setdefault(u, u)
    return sorted(found.values(), key=lambda u: (u.source, u.label))


def summary(results: Sequence[Result], arch: str, seconds: float, jobs: int) -> str:
    from . import cache

    counts = {k: sum(1 for r in results if r.outcome == k) for k in ("compiled", "cached", "checked", "failed")}
    done = (f"{counts['checked']} passed NVRTC's front end" if counts["checked"] else
            f"{counts['compiled']} compiled, {counts['cached']} already cached")
    return (f"precompile: {len(results)} compile units for {arch} ({done}, {counts['failed']} failed) in "
            f"{seconds:.1f} s with {jobs} processes" + ("" if counts["checked"] else f"; cache {cache.directory()}"))


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


def _parser() -> argparse.ArgumentParser:
    doc = (__doc__ or "").split(": ", 1)[1]
    parser = argparse.ArgumentParser(prog="python -m pyrms.precompile", description=doc.splitlines()[0],
                                     epilog="\n".join(doc.splitlines()[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", help="arch to compile for, e.g. sm_90 (default: $PYRMS_ARCH, else the GPU's)")
    parser.add_argument("--ops", type=parse_ops, default=None, help=f"comma list of {', '.join(OPS)} (default all)")
    parser.add_argument("--dtypes", type=dtypes.argument_list, default=None,
                        help="comma list, e.g. bf16,fp16 (default bfloat16, float16, float32; with --model, its "
                             "torch_dtype)")
    parser.add_argument("--model", type=Path, metavar="CONFIG.json",
                        help="a Hugging Face model's config.json: compile only the units of the norms that model "
                             "runs (model_config.norm_calls: the norm at its hidden size and QK-norm's widths, the fused residual add)")
    parser.add_argument("--training", action="store_true",
                        help="with --model: the backward too, and the weight in float32 beside 2-byte rows")
    parser.add_argument("--seed-hidden", type=_sizes, default=SEED_HIDDENS, metavar="LIST",
                        help=f"hidden sizes for the seed kernel (default {','.join(map(str, SEED_HIDDENS))}, "
                             "the demo's; empty for none)")
    parser.add_argument("--jobs", type=_jobs, default=os.cpu_count() or 1,
                        help="NVRTC processes at a time (default: the CPU count)")
    parser.add_argument("--cover", action="store_true",
                        help="only the few units that instantiate every kernel template with each value of each of "
                             "its template arguments at least once (about 50 of 440)")
    parser.add_argument("--syntax-only", action="store_true",
                        help="run NVRTC's front end only (parsing and template instantiation, about a seventh of a "
                             "compile): checks that this NVRTC accepts the kernels; no CUBIN, nothing cached")
    parser.add_argument("--list", action="store_true", help="print the compile units and exit (compiles nothing)")
    return parser


def _selection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[Unit], str]:
    """The units the arguments select, and what they are for the messages ("" for ops and dtypes)."""
    if args.model is None:
        if args.training:
            parser.error("--training goes with --model (without it every unit, backward included, is compiled)")
        units, about = every_unit(args.ops or OPS, args.dtypes or dtypes.ALL, seed_hiddens=args.seed_hidden), ""
    else:
        if args.ops is not None:
            parser.error("--model picks the ops itself; give --ops or --model, not both")
        try:
            model = model_config.read(args.model)
        except ValueError as exc:
            parser.error(str(exc))
        dtype_list = args.dtypes or ((model.dtype,) if model.dtype else None)
        if dtype_list is None:
            parser.error(f"{args.model} gives no torch_dtype: give --dtypes")
        units = model_units(model, dtype_list, args.training)
        about = (f" for {model.class_name} ({', '.join(dtypes.get(d).name for d in dtype_list)}, rows of "
                 f"{', '.join(map(str, model.widths))}{', training' if args.training else ''})")
    if args.cover:
        units = cover(units)
        about += " (covering every kernel template and template argument)"
    return units, about


def _arch(args: argparse.Namespace) -> str | None:
    """The arch to compile for; None once stderr says why there is none, or why compiling would be lost."""
    from . import cache, compiler, errors

    if not cache.enabled() and not args.syntax_only:
        print("precompile: PYRMS_DISABLE_CACHE is set, so compiling ahead would be lost", file=sys.stderr)
        return None
    try:
        return compiler.resolve_arch(args.arch)  # without --arch or PYRMS_ARCH: the GPU's, asked once, here
    except errors.NoDriverError as exc:
        print(f"precompile: no GPU to take the arch from ({exc}); pass --arch (e.g. --arch sm_90) or set "
              "PYRMS_ARCH", file=sys.stderr)
    except ValueError as exc:
        print(f"precompile: {exc}", file=sys.stderr)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit status (1 when a unit failed, 2 when nothing could be compiled)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        units, about = _selection(parser, args)
        for u in units:
            print(f"{u}: {len(u.names)} kernel{'s' if len(u.names) != 1 else ''}")
        print(f"precompile: {len(units)} compile units{about}")
        return 0
    arch = _arch(args)  # refused before the units are enumerated (a second for all of them)
    if arch is None:
        return 2
    if args.syntax_only:
        try:
            check_syntax_only()
        except ValueError as exc:
            print(f"precompile: {exc} (leave out --syntax-only)", file=sys.stderr)
            return 2
    units, about = _selection(parser, args)

    from . import cache, compiler

    jobs = max(1, min(args.jobs, len(units)))
    progress = None if compiler.quiet() else (lambda line: print(line, file=sys.stderr, flush=True))
    if progress is not None:
        into = "NVRTC's front end only" if args.syntax_only else f"into {cache.directory()}"
        progress(f"precompile: {len(units)} compile units{about} for {arch}, {jobs} processes, {into}")
    start = time.time()
    results = compile_units(units, arch, jobs, progress=progress, syntax_only=args.syntax_only)
    for r in results if progress is None else ():  # quiet: failures still say why (the progress lines do otherwise)
        if r.outcome == "failed":
            print(f"precompile: {r.unit} FAILED\n    {r.error}", file=sys.stderr)
    print(summary(results, arch, time.time() - start, jobs))
    return 1 if any(r.outcome == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line of ``python -m pyrms.bench`` and the order of a run's sections."""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from . import config as cfg
from . import ops as ops_mod
from . import targets as targets_mod

PROG = "python -m pyrms.bench"

EPILOG = """
sections: the copy ceiling; the shape sweep (each implementation validated, then timed); after a GEMM, in a
CUDA graph (at the shapes of up to --after-gemm-tokens tokens: each implementation after a GEMM that writes its
input, {pairs} pairs GEMM -> norm captured into a graph, less the graph of the GEMMs alone, per norm); the launch
floor (an empty kernel and a one-row copy, back to back and in a CUDA graph, each without and with
programmatic dependent launch); host time per call; CUDA graph capture and replay; the copy ceiling
again; the targets (bandwidth, decode latency, host time per call), each PASS, FAIL or N/A with its
numbers. Progress goes to stderr, the report to stdout and to OUT/NAME.txt, all numbers to
OUT/NAME.json, the plot to OUT/NAME.png (when matplotlib is importable).

default shapes: tokens {tokens} x hidden {hidden}; with
--quick: tokens {quick_tokens} x hidden {quick_hidden}, fewer
repetitions, torch.compile only at the largest token count (each shape compiles for seconds).
Without --ops, {extras} run at {extra_shapes} only, where
their targets are, and only if pyrms has them; --ops runs the ops named at every selected shape.

implementations: pyrms (each op as it launches by default, with programmatic dependent launch, PDL),
pyrms_nopdl (the same with pdl=False), seed (the seed kernel, compiled by NVRTC; hidden/VEC <= 1024 threads
only), torch (PyTorch eager), compile (torch.compile of it), triton (a Triton kernel), liger (Liger-Kernel),
flashinfer and flashinfer_pdl (FlashInfer with enable_pdl=False and True): each op declares its own in
pyrms/ops/<family>/bench.py, and those that cannot run are listed as skipped, with the reason.
Comparisons are like for like: pyrms without PDL against the seed kernel and
{nopdl_peers} (all launched without PDL),
pyrms with PDL against {pdl_peers} only; so --impls naming pyrms and an implementation without PDL
times pyrms_nopdl too (a note says so).
Exit status: 0 when the run completed, 1 if a pyrms output failed validation or the run broke off,
2 for bad arguments or no GPU.

examples:
  {prog} --quick
  {prog} --shapes 16384x5120,4096x16384 --impls pyrms,triton --out "$OUT"
  {prog} --dtypes bf16,fp16,fp32 --tokens 1024,16384 --hidden 5120
"""


def _join(names) -> str:
    names = list(names)
    return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]


def extra_op_shapes() -> tuple[cfg.Shape, ...]:
    """The shapes a default run times the other ops at: their targets' (the extra-op shape, and each op's shape
    against torch eager), smallest first."""
    own = (b.targets.vs_eager for b in ops_mod.benches().values() if b.targets.vs_eager)
    shapes = {targets_mod.EXTRA_OP_SHAPE, *own}
    return tuple(cfg.Shape(t, h) for t, h in sorted(shapes))


def epilog() -> str:
    """EPILOG with the run's defaults and the ops (from the registry's benchmark declarations) filled in."""
    ints = lambda values: ",".join(map(str, values))  # noqa: E731
    return EPILOG.format(pairs=cfg.AFTER_GEMM_PAIRS, tokens=ints(cfg.TOKENS), hidden=ints(cfg.HIDDEN), quick_tokens=ints(cfg.QUICK_TOKENS),
                         quick_hidden=ints(cfg.QUICK_HIDDEN), extras=_join(ops_mod.extras()),
                         extra_shapes=_join(map(str, extra_op_shapes())), prog=PROG,
                         nopdl_peers=_join(cfg.IMPL_LABELS[i] for i in cfg.OTHER_IMPLS),
                         pdl_peers=_join(cfg.IMPL_LABELS[i] for i in cfg.OTHER_PDL_IMPLS))


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """One line on stderr and exit status 2 (argparse's default prints the whole usage first)."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _typed(parse, what=None):
    def convert(text):
        try:
            return parse(text) if what is None else parse(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = what or parse.__name__
    return convert


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="RMSNorm kernels against the device-to-device copy ceiling, the seed "
                "kernel, PyTorch (eager and torch.compile), Triton, Liger and FlashInfer: device time, GB/s, host time, "
                "CUDA graphs.",
                epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a handful of shapes and fewer repetitions: under a minute")
    g = p.add_argument_group("what to measure")
    g.add_argument("--tokens", type=_typed(cfg.parse_ints, "--tokens"), metavar="LIST", help="e.g. 1,128,4096")
    g.add_argument("--hidden", type=_typed(cfg.parse_ints, "--hidden"), metavar="LIST", help="e.g. 5120,8192")
    g.add_argument("--shapes", type=_typed(cfg.parse_shapes), metavar="LIST",
                   help="TOKENSxHIDDEN pairs instead of the grid, e.g. 16384x5120,4096x16384")
    g.add_argument("--dtypes", type=_typed(cfg.parse_dtypes), metavar="LIST", default=("bfloat16",),
                   help="bf16, fp16, fp32 or all (default bf16)")
    g.add_argument("--ops", type=_typed(cfg.parse_ops), metavar="LIST", help=f"{', '.join(ops_mod.swept())} or all")
    g.add_argument("--impls", type=_typed(cfg.parse_impls), metavar="LIST", default=cfg.IMPLS,
                   help=f"{', '.join(cfg.IMPLS)} or all (default all)")
    g.add_argument("--no-sweep", action="store_true", help="skip the shape sweep")
    g.add_argument("--no-floor", action="store_true", help="skip the launch floor")
    g.add_argument("--no-host", action="store_true", help="skip host time per call")
    g.add_argument("--no-graphs", action="store_true", help="skip CUDA graph capture and replay")
    g.add_argument("--no-after-gemm", action="store_true", help="skip the norms after a GEMM, in a CUDA graph")
    g.add_argument("--after-gemm-tokens", type=_typed(cfg.parse_count), metavar="N", default=cfg.DECODE_MAX_TOKENS,
                   help="time the norms after a GEMM at the shapes of up to N tokens (default "
                        f"{cfg.DECODE_MAX_TOKENS}: where a norm costs a few us and what runs before it shows; "
                        "each larger shape adds its GEMMs' time)")
    g.add_argument("--gemm-k", type=_typed(cfg.parse_count), metavar="K",
                   help="inner size of the GEMM before each norm, [T, K] @ [K, H] (default K = H)")
    t = p.add_argument_group("how to measure")
    t.add_argument("--rounds", type=_typed(cfg.parse_count), metavar="N", help="passes over all implementations per shape "
                   "(their spread is the run-to-run spread; default 3, --quick 2)")
    t.add_argument("--reps", type=_typed(cfg.parse_count), metavar="N", help="samples per implementation per round (default 10, --quick 5)")
    t.add_argument("--batch", type=_typed(cfg.parse_count), metavar="N", help="launches per sample (default: ~1 ms of work, 3 to 100)")
    t.add_argument("--host-calls", type=_typed(cfg.parse_count), metavar="N", help="calls per variant in the host timing (default 20000, --quick 5000)")
    t.add_argument("--copy-mib", type=_typed(cfg.parse_count), default=1024, metavar="MIB",
                   help="size of the copy that measures the ceiling (default 1024)")
    t.add_argument("--memory-cap", type=float, default=8.0, metavar="GIB",
                   help="most device memory for one shape's rotation sets (default 8)")
    t.add_argument("--epsilon", type=float, default=1e-6, help="default 1e-6")
    t.add_argument("--seed", type=int, default=0, help="random inputs' seed (default 0)")
    t.add_argument("--device", type=int, default=0, help="CUDA device ordinal that every measurement runs on (default 0; python -m pyrms.info lists them)")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("bench/results"), metavar="DIR",
                   help="directory for NAME.json, NAME.txt, NAME.png (default bench/results)")
    o.add_argument("--name", metavar="NAME", help="file name stem (default bench-DATE-TIME, with -quick for --quick)")
    o.add_argument("--no-plot", action="store_true", help="write no PNG")
    return p


def _available_extra_ops() -> tuple[str, ...]:
    import pyrms

    return tuple(op for op in ops_mod.extras() if hasattr(pyrms, op))


def like_for_like_impls(impls: tuple[str, ...]) -> tuple[str, ...]:
    """``impls`` with pyrms_nopdl added where pyrms is asked for beside a peer that launches without PDL (the
    seed kernel among them): like for like, those are set against pyrms without PDL only."""
    if "pyrms" in impls and cfg.NOPDL not in impls and any(i in cfg.OTHER_IMPLS + ("seed",) for i in impls):
        return tuple(i for i in cfg.IMPLS if i in impls or i == cfg.NOPDL)
    return impls


def build_config(args, now: datetime.datetime | None = None) -> cfg.Config:
    """The run an argparse namespace describes; ValueError for combinations argparse cannot check."""
    if args.shapes and (args.tokens or args.hidden):
        raise ValueError("--shapes replaces --tokens and --hidden: give one or the other")
    if args.memory_cap <= 0:
        raise ValueError(f"--memory-cap must be > 0, got {args.memory_cap}")
    if not (args.epsilon >= 0 and args.epsilon != float("inf")):
        raise ValueError(f"--epsilon must be finite and >= 0, got {args.epsilon}")
    quick = args.quick
    if args.shapes:
        shapes = args.shapes
    else:
        shapes = cfg.grid(args.tokens or (cfg.QUICK_TOKENS if quick else cfg.TOKENS),
                          args.hidden or (cfg.QUICK_HIDDEN if quick else cfg.HIDDEN))
    notes = []
    if args.ops:
        ops, extra_shapes = args.ops, None
    else:
        available = _available_extra_ops()
        ops, extra_shapes = (ops_mod.headline(),) + available, extra_op_shapes()
        missing = [op for op in ops_mod.extras() if op not in available]
        if missing:
            notes.append(f"not in this pyrms, so not measured: {', '.join(missing)}")
    impls = like_for_like_impls(args.impls)
    if impls != args.impls:
        notes.append(f"{cfg.NOPDL} added to --impls: pyrms without PDL is the figure set against "
                     f"{_join(cfg.IMPL_LABELS[i] for i in args.impls if i in cfg.OTHER_IMPLS + ('seed',))}, "
                     "which launch without PDL")
    compile_tokens = None
    if quick and "compile" in impls:
        compile_tokens = max(s.tokens for s in shapes)
        notes.append(f"--quick: torch.compile runs only for {ops_mod.headline()} at {compile_tokens} tokens (each shape "
                     "compiles for seconds); run without --quick for every shape")
    now = now or datetime.datetime.now()
    stem = args.name or f"bench-{now:%Y%m%d-%H%M%S}" + ("-quick" if quick else "")
    return cfg.Config(
        shapes=shapes, dtypes=args.dtypes, ops=ops, impls=impls, quick=quick,
        rounds=args.rounds or (2 if quick else 3), reps=args.reps or (5 if quick else 10), batch=args.batch,
        sweep=not args.no_sweep, floor=not args.no_floor, host=not args.no_host, graphs=not args.no_graphs,
        after_gemm=not args.no_after_gemm, after_gemm_tokens=args.after_gemm_tokens, gemm_k=args.gemm_k,
        host_calls=args.host_calls or (5000 if quick else 20000), memory_cap_gib=args.memory_cap, copy_mib=args.copy_mib,
        epsilon=args.epsilon, seed=args.seed, device=args.device, out_dir=args.out, stem=stem,
        plot=not args.no_plot, extra_op_shapes=extra_shapes, compile_tokens=compile_tokens, notes=notes)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = build_config(args)
    except ValueError as exc:
        parser.error(str(exc))
    from .. import driver

    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"{PROG}: no CUDA GPU available: {reason}", file=sys.stderr)
        return 2
    try:  # before anything is measured: an ordinal this machine lacks is a bad argument
        driver.get_device(config.device)
    except ValueError as exc:
        parser.error(f"--device: {exc}")
    from .run import run

    return run(config, argv)

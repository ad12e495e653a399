#!/usr/bin/env python3
"""Dump a pyrms kernel's PTX, CUBIN and SASS, and summarize the width of its global loads and stores.

Needs no GPU: NVRTC compiles for the arch given (default $PYRMS_ARCH, else sm_90), with
--ptxas-options=-v so that the log carries registers, stack and spills per kernel.

    python -m tools.ptx_dump                          # pyrms::rms_norm_kernel, bfloat16, hidden 5120
    python -m tools.ptx_dump --kernel seed_rms_norm   # the seed kernel, VEC and BLOCK as the seed picks
    python -m tools.ptx_dump --variant cache=0,round_once --show-loads --context 2

Writes <out>/<kernel>-<dtype>-h<hidden>-<arch>[-<variant>].ptx, .cubin and .ptxas.txt, and .sass
when cuobjdump or nvdisasm is found. The kernels are the registry's ops (pyrms.ops.registry).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from pyrms import compiler, dtypes, ptx_inspect

from pyrms.ops import _row_plan as plan
from pyrms.errors import CompileError, PyrmsError
from pyrms.ops import registry
from pyrms.ops._spec import OpSpec

PTXAS_VERBOSE = "--ptxas-options=-v"
_SASS_ARGS = {"cuobjdump": ["--dump-sass"], "nvdisasm": []}  # in order of preference


def _flag(text: str | None) -> bool:
    """A variant switch: bare ('gemma') means true."""
    words = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
    value = True if text is None else words.get(text.lower())
    if value is None:
        raise ValueError(f"expected true or false (1 or 0), got {text!r}")
    return value


def _cache_vectors(text: str | None) -> int:
    choices = [str(c) for c in (0, *plan.CACHE_CHOICES)]
    if text not in choices:
        raise ValueError(f"expected cache={'|'.join(choices)}, got {'no value' if text is None else repr(text)}")
    return int(text)


def _backward_vectors(vectors: tuple[int, ...]) -> Callable[[str | None], int]:
    """The vectors= switch of a backward whose plan offers ``vectors`` (Inspect.vectors) beside 0."""
    choices = [str(c) for c in (0, *vectors)]

    def parse(text: str | None) -> int:
        if text not in choices:
            raise ValueError(f"expected vectors={'|'.join(choices)}, got {'no value' if text is None else repr(text)}")
        return int(text)
    return parse


def _grad_dtype(text: str | None):
    if text is None:
        raise ValueError("expected grad=<dtype> (the storage dtype or float32), got no value")
    return dtypes.get(text).name


def _backward_plan(planner: Callable, dt: dtypes.DType, hidden: int, v: dict):
    weightless = v.get("weightless", False)
    if not v.get("grad_bias", True) and not weightless:
        raise ValueError("grad_bias=false is a variant of the kernel without weight (with one, dbias is always "
                         "summed): add weightless")
    planned = planner(dt, hidden, gemma=v.get("gemma", False), grad_dtype=v.get("grad"), weight=not weightless,
                      grad_bias=v.get("grad_bias"))
    return replace(planned, vectors=v.get("vectors", planned.vectors))


def _backward_family(spec: OpSpec) -> "Family":
    """A backward's kernel (norm_backward.cuh): variants vectors, weightless and the op's own switches."""
    planner = spec.inspect.planner

    def defaults(dt: dtypes.DType, hidden: int) -> dict:
        return {"vectors": _backward_plan(planner, dt, hidden, {}).vectors, **spec.inspect.extra, "weightless": False}
    return Family(spec.source, spec.inspect.about, lambda dt, hidden, v: _backward_plan(planner, dt, hidden, v).expression,
                  defaults, {"vectors": _backward_vectors(spec.inspect.vectors),
                             **{key: _flag for key in spec.inspect.extra}, "weightless": _flag})


def _row_expression(planner: Callable, dt: dtypes.DType, hidden: int, v: dict) -> str:
    """A row-core kernel's name expression: the planned one for many rows, or with few (the latency
    shape, its spread as planned for the cache; with aligned, its all-body variant); cache and the
    option flags as given."""
    options = {key: value for key, value in v.items() if key not in ("few", "aligned")}
    if options.pop("fp32_sum", False) or options.get("fp32_residual"):  # fused add's second semantics
        options["sum_precision"] = "fp32"
        if options.get("out", "same") != "same":
            raise ValueError("out=float32 is a variant of the rounded sum's kernels only (fused_add_rms_norm_out_kernel)")
    planned = replace(planner(dt, hidden), **options)
    if v["aligned"] and not v["few"]:
        raise ValueError("aligned is a variant of the few-row kernel: add few")
    if v["few"]:
        return planned.aligned_latency_expression if v["aligned"] else planned.latency_expression
    return planned.expression


def _weight_kind(text: str | None) -> str:
    if text not in plan.WEIGHT_KINDS:
        raise ValueError(f"expected weight={'|'.join(plan.WEIGHT_KINDS)}, got {'no value' if text is None else repr(text)}")
    return text


def _out_kind(text: str | None) -> str:
    if text not in plan.OUT_KINDS:
        raise ValueError(f"expected out={'|'.join(plan.OUT_KINDS)}, got {'no value' if text is None else repr(text)}")
    return text


def _row_family(planner: Callable, source: str, about: str, flags: dict, weight: bool = False,
                out: bool = True) -> "Family":
    """A kernel family on the row core (row_core.cuh): variants cache, few, aligned, its option flags, with
    `out` the output's kind (out=float32: an fp32 output beside bf16/fp16 rows, plan.OUT_KINDS; the
    quantizing kernels have out_dtype instead), and with `weight` the weight's kind (plan.WEIGHT_KINDS:
    the dtype's, float32, none)."""
    kinds = ({"weight": "same"} if weight else {}) | ({"out": "same"} if out else {})
    return Family(source, about, lambda dt, hidden, v: _row_expression(planner, dt, hidden, v),
                  lambda dt, hidden: {"cache": planner(dt, hidden).cache, "few": False, "aligned": False, **flags,
                                      **kinds},
                  {"cache": _cache_vectors, "few": _flag, "aligned": _flag, **{key: _flag for key in flags},
                   **({"weight": _weight_kind} if weight else {}), **({"out": _out_kind} if out else {})})


def _quant_dtype(text: str | None) -> str:
    if text is None:
        raise ValueError(f"expected out_dtype=<{'|'.join(q.name for q in dtypes.QUANTIZED)}>, got no value")
    return dtypes.quantized(text).name


def _quant_mode(modes: tuple[str, ...]) -> Callable:
    """The parser of mode=, one of ``modes``."""
    def parse(text: str | None) -> str:
        if text not in modes:
            raise ValueError(f"expected mode={'|'.join(modes)}, got {'no value' if text is None else repr(text)}")
        return text
    return parse


def _quant_family(spec: OpSpec) -> "Family":
    """The quantizing kernels: the row family's variants plus round_input, norm_out (the unquantized output
    beside), the spec's extra switches (the fused add's fp32_sum), the output dtype and the mode (per_group: the
    group kernels; the group size is a run-time argument)."""
    planner = spec.inspect.planner
    row = _row_family(planner, spec.source, "", {**{name: False for name in spec.flags}, **spec.inspect.extra}, out=False)
    modes = tuple(dict.fromkeys(options["mode"] for options in spec.option_sets(dtypes.BFLOAT16)))  # what compiles
    return Family(
        spec.source, spec.inspect.about,
        lambda dt, hidden, v: _row_expression(planner, dt, hidden, {**v, "out_dtype": dtypes.quantized(v["out_dtype"])}),
        lambda dt, hidden: {**row.defaults(dt, hidden), "out_dtype": "float8_e4m3fn", "mode": "static"},
        {**row.variant_keys, "out_dtype": _quant_dtype, "mode": _quant_mode(modes)})


def _seed_family(spec: OpSpec) -> "Family":
    return Family(spec.source, spec.inspect.about, lambda dt, hidden, v: spec.inspect.planner(dt, hidden).expression)


def _registry_family(spec: OpSpec) -> "Family":
    """The op's kernels as a family of variants, by the grammar its spec names (Inspect.kind)."""
    if spec.inspect.kind == "row":
        return _row_family(spec.inspect.planner, spec.source, spec.inspect.about,
                           {**{name: False for name in spec.flags}, **spec.inspect.extra}, weight=spec.inspect.weight,
                           out=spec.inspect.out)
    return {"backward": _backward_family, "quant": _quant_family, "seed": _seed_family}[spec.inspect.kind](spec)


@dataclass(frozen=True)
class Family:
    """How to instantiate one kernel family: its source, and the name expression for a variant."""

    source: str
    about: str
    expression: Callable[[dtypes.DType, int, dict], str]
    defaults: Callable[[dtypes.DType, int], dict] = lambda dt, hidden: {}
    variant_keys: dict[str, Callable[[str | None], object]] = field(default_factory=dict)


# Every op's kernels (the registry's), and the backward's second kernel, the fixed-order sum over row chunks,
# as the first backward instantiates it.
FAMILIES = {spec.name: _registry_family(spec) for spec in registry.REGISTRY.values() if spec.inspect is not None}
_SUMS = next(spec for spec in registry.REGISTRY.values() if spec.inspect is not None and spec.inspect.kind == "backward")
FAMILIES["sum_partials"] = Family(
    _SUMS.source, "pyrms::sum_partials_kernel<grad dtype>, the fixed-order sum over row chunks",
    lambda dt, hidden, v: _backward_plan(_SUMS.inspect.planner, dt, hidden, v).sum_expression,
    lambda dt, hidden: {"grad": dt.name}, {"grad": _grad_dtype})
DEFAULT_KERNEL = next(iter(FAMILIES))  # the registry's first op


def resolve_variant(family: Family, text: str | None, dt: dtypes.DType, hidden: int) -> dict:
    """The family's defaults for (dtype, hidden), overridden by --variant's 'key=value,key'."""
    variant = family.defaults(dt, hidden)
    if not text:
        return variant
    if not family.variant_keys:
        raise ValueError(f"--variant {text!r}: this kernel has no variants")
    for item in text.split(","):
        key, has_value, value = item.strip().partition("=")
        parse = family.variant_keys.get(key)
        if parse is None:
            raise ValueError(f"--variant: unknown key {key!r}; allowed: {', '.join(family.variant_keys)}")
        try:
            variant[key] = parse(value if has_value else None)
        except ValueError as e:
            raise ValueError(f"--variant {key}: {e}") from None
    return variant


def output_stem(kernel: str, dt: dtypes.DType, hidden: int, arch: str, variant: dict) -> str:
    """'<kernel>-bfloat16-h5120-sm_90-cache1-gemma': switches appear only when on, the weight and the
    output only when they are not the dtype's ('weightfloat32', 'outfloat32')."""
    parts = [kernel, dt.name, f"h{hidden}", arch]
    parts += [key if value is True else f"{key}{value}" for key, value in variant.items()
              if value is not False and not (key in ("weight", "out") and value == "same")]
    return "-".join(parts)


def find_sass_tool(search_path: str | None = None) -> Path | None:
    """cuobjdump, else nvdisasm: on PATH first, then in $CUDA_HOME/bin and /usr/local/cuda/bin."""
    if search_path is None:
        roots = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
        search_path = os.pathsep.join([os.environ.get("PATH", ""), *(str(Path(r, "bin")) for r in roots if r)])
    for name in _SASS_ARGS:
        found = shutil.which(name, path=search_path)
        if found:
            return Path(found)
    return None


def write_sass(cubin: Path, tool: Path | None) -> str:
    """Disassemble `cubin` into a .sass file beside it; returns one line saying what happened."""
    if tool is None:
        return "SASS skipped: neither cuobjdump nor nvdisasm found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    try:
        done = subprocess.run([str(tool), *_SASS_ARGS[tool.stem], str(cubin)],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"SASS failed: {tool}: {e}"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"SASS failed: {tool} exited with status {done.returncode}: {reason}"
    sass = cubin.with_suffix(".sass")
    sass.write_text(done.stdout)
    return f"SASS:      {sass} (by {tool})"


def dump(args, family: Family, variant: dict, expression: str) -> None:
    """Compile, write the files, print the summary (and the listings with --show-loads)."""
    shown = " ".join(f"{k}={v}" for k, v in variant.items())
    print(f"{args.kernel}: {expression} from {family.source} ({args.dtype.name}, hidden {args.hidden}, "
          f"{args.arch}{', ' + shown if shown else ''})")
    program = compiler.compile_source(family.source, arch=args.arch, name_expressions=[expression],
                                      options=[PTXAS_VERBOSE], use_cache=False if args.no_cache else None,
                                      want_ptx=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out.resolve() / output_stem(args.kernel, args.dtype, args.hidden, args.arch, variant)
    ptx, cubin, log = (Path(f"{stem}{suffix}") for suffix in (".ptx", ".cubin", ".ptxas.txt"))
    ptx.write_text(program.ptx)
    cubin.write_bytes(program.cubin)
    log.write_text(program.log + "\n")
    print(f"PTX:       {ptx}\nCUBIN:     {cubin}\nptxas log: {log}")
    print(write_sass(cubin, find_sass_tool()))

    labels = {lowered: expr for expr, lowered in program.lowered_names.items()}
    resources = ptx_inspect.parse_ptxas_log(program.log)
    print("\nstatic counts (instructions in the PTX, not executed ones):")
    for fn in ptx_inspect.parse_functions(program.ptx):
        print(ptx_inspect.format_summary(fn, resources.get(fn.name), labels.get(fn.name)))
        if args.show_loads:
            print(f"  global ld/st lines (±{args.context} lines of context):")
            print(ptx_inspect.memory_listing(program.ptx, fn, args.context))


class _Parser(argparse.ArgumentParser):
    """Reports a bad argument as one line on stderr (no usage block), so it reads well in logs."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _checked(convert: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse type from a converter whose ValueError already says what is allowed."""
    def parse(text: str):
        try:
            return convert(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    variants = "; ".join(f"{name}: {', '.join(f.variant_keys) or 'none'}" for name, f in FAMILIES.items())
    kernels = "; ".join(f"{name} = {f.about}" for name, f in FAMILIES.items())
    parser = _Parser(prog="ptx_dump.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", choices=list(FAMILIES), default=DEFAULT_KERNEL,
                        help=f"kernel family, default {DEFAULT_KERNEL}: {kernels}")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16",
                        help="storage dtype: bfloat16 (default), float16 or float32, or an alias: bf16, fp16, half, "
                             "fp32, float")
    parser.add_argument("--hidden", type=_at_least(1), default=5120,
                        help="hidden size, elements per row (default 5120)")
    parser.add_argument("--arch", type=_checked(compiler.normalize_arch),
                        default=os.environ.get("PYRMS_ARCH") or "sm_90",
                        help="target arch: sm_90, 90, compute_90, sm_90a, ... (default $PYRMS_ARCH, else sm_90); "
                             "no GPU needed")
    parser.add_argument("--variant", default=None,
                        help="template variant as comma-separated key=value, a bare key meaning true, e.g. "
                             "'cache=0,gemma,round_once=false'; unset keys follow the op's plan for --dtype and "
                             f"--hidden (gemma and round_once: false). Keys per kernel: {variants}")
    parser.add_argument("--out", type=Path, default=Path("ptx_out"),
                        help="directory for the .ptx, .cubin, .ptxas.txt and .sass files (default ./ptx_out)")
    parser.add_argument("--show-loads", action="store_true",
                        help="also list each kernel's ld.global/st.global lines from the PTX, with line numbers")
    parser.add_argument("--context", type=_at_least(0), default=0,
                        help="lines of context around each line --show-loads lists (default 0)")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not write the CUBIN to pyrms's disk cache (PTX is always compiled afresh)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    family = FAMILIES[args.kernel]
    try:
        variant = resolve_variant(family, args.variant, args.dtype, args.hidden)
        expression = family.expression(args.dtype, args.hidden, variant)
    except ValueError as e:
        parser.error(str(e))
    try:
        dump(args, family, variant, expression)
    except CompileError as e:  # several lines on purpose: the NVRTC log and the numbered source
        print(e, file=sys.stderr)
        return 1
    except (PyrmsError, OSError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shape grids, implementation and dtype names, and parsing of the command line's lists (pure)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import dtypes as dtypes_mod
from . import ops as ops_mod

TOKENS = (1, 5, 32, 128, 1024, 4096, 16384, 32768)
HIDDEN = (4096, 5120, 8192, 16384)
QUICK_TOKENS = (1, 128, 4096, 16384)
QUICK_HIDDEN = (5120, 8192)

IMPLS = ("pyrms", "pyrms_nopdl", "seed", "torch", "compile", "triton", "liger", "flashinfer", "flashinfer_pdl")
PYRMS_IMPLS = ("pyrms", "pyrms_nopdl")  # pyrms's own outputs: a failed validation fails the run
# Programmatic dependent launch lets a kernel start before the one ahead of it on the stream has finished, which
# at decode shapes is a large share of a launch's time: a ratio between a launch with it and one without would
# measure PDL more than the kernels. Each pyrms figure is therefore set only against peers launched the same way.
OTHER_IMPLS = ("torch", "compile", "triton", "liger", "flashinfer")  # the peers launched without PDL
OTHER_PDL_IMPLS = ("flashinfer_pdl",)  # the peers launched with PDL
NOPDL = "pyrms_nopdl"  # pyrms's figure against every peer that launches without PDL: the seed kernel, torch eager too
LIKE_FOR_LIKE = ((NOPDL, OTHER_IMPLS), ("pyrms", OTHER_PDL_IMPLS))  # pyrms's figure -> its peers
IMPL_ALIASES = {"eager": "torch", "liger-kernel": "liger", "liger_kernel": "liger", "torch.compile": "compile", "torch_compile": "compile", "inductor": "compile",
                "nopdl": "pyrms_nopdl", "pyrms-nopdl": "pyrms_nopdl", "no-pdl": "pyrms_nopdl",
                "flashinfer-pdl": "flashinfer_pdl"}
IMPL_LABELS = {"pyrms": "pyrms", "pyrms_nopdl": "pyrms (no pdl)", "seed": "seed", "torch": "torch eager",
               "compile": "torch.compile", "triton": "Triton", "liger": "Liger", "flashinfer": "FlashInfer",
               "flashinfer_pdl": "FlashInfer (pdl)"}
# Each implementation's colour and marker in the plot, the same in every panel and in its legend (left to
# matplotlib, a colour follows the order lines are drawn in, which changes with the panel's implementations).
IMPL_STYLES = {"pyrms": ("#1f77b4", "o"), "pyrms_nopdl": ("#17becf", "P"), "seed": ("#7f7f7f", "s"),
               "torch": ("#d62728", "^"), "compile": ("#ff7f0e", "v"), "triton": ("#2ca02c", "D"),
               "liger": ("#9467bd", "X"), "flashinfer": ("#8c564b", "*"), "flashinfer_pdl": ("#e377c2", "h")}
DECODE_MAX_TOKENS = 128  # shapes up to this many tokens are latency-bound: judged against the launch floor
AFTER_GEMM_PAIRS = 8  # GEMM -> norm pairs in one graph of the after-GEMM section
FLOOR_HIDDEN = (4096, 5120, 8192)  # the launch floor's one-row copy, at these and every decode hidden of a run
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True, order=True)
class Shape:
    tokens: int
    hidden: int

    def __str__(self) -> str:
        return f"{self.tokens}x{self.hidden}"


def grid(tokens, hidden) -> tuple[Shape, ...]:
    return tuple(Shape(t, h) for h in hidden for t in tokens)


def _positive(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise ValueError(f"{what}: {text!r} is not a positive integer")
    return int(text)


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """'1,5,32' -> (1, 5, 32); ValueError naming the bad item."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{what}: empty list")
    values = tuple(_positive(item, what) for item in items)
    return tuple(sorted(set(values)))


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """'4096x5120,16384x8192' (x, X, × or * between tokens and hidden) -> Shapes."""
    shapes = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        parts = re.split(r"[xX×*]", item)
        if len(parts) != 2:
            raise ValueError(f"--shapes: {item!r} is not TOKENSxHIDDEN (e.g. 4096x5120)")
        shapes.append(Shape(_positive(parts[0], "--shapes tokens"), _positive(parts[1], "--shapes hidden")))
    if not shapes:
        raise ValueError("--shapes: empty list")
    return tuple(sorted(set(shapes), key=lambda s: (s.hidden, s.tokens)))


def parse_names(text: str, what: str, allowed, aliases=None) -> tuple[str, ...]:
    """A comma list of names from ``allowed`` (or 'all'), aliases resolved, order of ``allowed`` kept."""
    aliases = aliases or {}
    chosen = set()
    for item in (i.strip().lower() for i in text.split(",")):
        if not item:
            continue
        if item == "all":
            chosen.update(allowed)
            continue
        name = aliases.get(item, item)
        if name not in allowed:
            raise ValueError(f"{what}: {item!r} is not one of {', '.join(allowed)} (or 'all')")
        chosen.add(name)
    if not chosen:
        raise ValueError(f"{what}: empty list")
    return tuple(name for name in allowed if name in chosen)


def parse_ops(text: str) -> tuple[str, ...]:
    """The swept ops named (ops.swept(), or 'all'), each op's aliases (ops.Bench.aliases) resolved."""
    return parse_names(text, "--ops", ops_mod.swept(), ops_mod.aliases())


def parse_impls(text: str) -> tuple[str, ...]:
    return parse_names(text, "--impls", IMPLS, IMPL_ALIASES)


def parse_count(text: str) -> int:
    """One positive integer (rounds, repetitions, batch sizes, calls)."""
    return _positive(text, "count")


def parse_dtypes(text: str) -> tuple[str, ...]:
    """Canonical dtype names (pyrms.dtypes.get's names and aliases, or 'all'), in pyrms.dtypes.ALL's order."""
    chosen = set()
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if item.lower() == "all":
            chosen.update(d.name for d in dtypes_mod.ALL)
            continue
        try:
            chosen.add(dtypes_mod.get(item).name)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--dtypes: {exc}") from None
    if not chosen:
        raise ValueError("--dtypes: empty list")
    return tuple(d.name for d in dtypes_mod.ALL if d.name in chosen)


@dataclass
class Config:
    """Everything one run does; built by cli.build_config from the command line."""

    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...] = ("bfloat16",)
    ops: tuple[str, ...] = field(default_factory=lambda: (ops_mod.headline(),))
    impls: tuple[str, ...] = IMPLS
    quick: bool = False
    rounds: int = 3
    reps: int = 10
    batch: int | None = None
    sweep: bool = True
    floor: bool = True
    host: bool = True
    graphs: bool = True
    after_gemm: bool = True
    after_gemm_tokens: int = DECODE_MAX_TOKENS  # the after-GEMM section's shapes: at most this many tokens
    gemm_k: int | None = None  # the inner size of the GEMM before each norm (None: the norm's hidden)
    host_calls: int = 20000
    copy_mib: int = 1024
    memory_cap_gib: float = 8.0
    l2_factor: float = 2.0
    epsilon: float = 1e-6
    seed: int = 0
    device: int = 0
    out_dir: Path = Path("bench/results")
    stem: str = "bench"
    plot: bool = True
    extra_op_shapes: tuple[Shape, ...] | None = None  # the other ops' shapes (None: same as shapes)
    compile_tokens: int | None = None  # torch.compile only for the headline op at this token count (None: everywhere)
    notes: list[str] = field(default_factory=list)

    def shapes_for(self, op: str) -> tuple[Shape, ...]:
        if op != ops_mod.headline() and self.extra_op_shapes is not None:
            return self.extra_op_shapes
        return self.shapes

    def impls_for(self, op: str) -> tuple[str, ...]:
        return tuple(i for i in self.impls if i in ops_mod.get(op).impls)

    def floor_hiddens(self) -> tuple[int, ...]:
        """Row sizes of the launch floor's one-row copy: FLOOR_HIDDEN and every hidden of the run's
        decode shapes (the headline op's, tokens <= DECODE_MAX_TOKENS)."""
        decode = {s.hidden for s in self.shapes_for(ops_mod.headline()) if s.tokens <= DECODE_MAX_TOKENS}
        return tuple(sorted(decode.union(FLOOR_HIDDEN)))

    def compile_at(self, op: str, shape: Shape) -> bool:
        """Whether torch.compile runs for ``op`` at ``shape`` (--quick: the headline op at one token count)."""
        return self.compile_tokens is None or (op == ops_mod.headline() and shape.tokens == self.compile_tokens)

    @property
    def json_path(self) -> Path:
        return self.out_dir / f"{self.stem}.json"

    @property
    def text_path(self) -> Path:
        return self.out_dir / f"{self.stem}.txt"

    @property
    def plot_path(self) -> Path:
        return self.out_dir / f"{self.stem}.png"

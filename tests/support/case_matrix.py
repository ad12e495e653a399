"""The case matrix: every layout and option set the checks launch, as data; pure, no GPU.

One generator for the GPU tests (``gpu(family, axis)``), the sanitizer sweep (``sanitize(family,
quick=)``, tools/sanitize_all.py), the concurrency check (``concurrency(op)``), the soak (``SOAK``) and
the randomized check (tests.support.random_cases draws its cases in this vocabulary and runs them as ``Case``).
A ``Case`` names the op, dtype, rows, hidden size, each pointer's element offset past a 16-byte
boundary, each row operand's stride and the options away from their defaults, in canonical form
(sorted; zero offsets, dense strides and defaults left out), so equal cases compare equal and a
matrix holds each once. ``tests.support.testing.check_case`` runs one.

A family is what tools/sanitize_all.py reports a case under (pyrms.precompile.OPS): the op it calls,
except ``rms_norm_nd``, which also holds plain rms_norm calls of many short rows (the N-D kernel's
packed rows). A new variant is one more option value on the axes below; it then reaches every consumer.

The axes are shared here; each op's own cases (its GPU axes, sanitizer sweep and concurrency launches) are in
its tests' folder, tests/ops/<family>/cases.py, found through the registry (tests.support.op_tests).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator

from pyrms import dtypes
from pyrms.ops import registry
from tests.support import op_tests

# The ops, from the registry: each case names one, and each is a family the sanitizer sweep reports under.
OPS = FAMILIES = registry.NAMES
BACKWARD = registry.with_check("backward")
QUANT = registry.with_check("quant")
STANDALONE_QUANT = registry.with_check("static_quant") + registry.with_check("dynamic_quant")  # no norm, no weight
DTYPES = tuple(d.name for d in dtypes.ALL)

# Every option a case may set, at its default (what the checkers of tests.support.testing take when it is left out).
DEFAULTS = {"epsilon": 1e-5, "variant": None, "pdl": None, "gemma": False, "round_once": False, "in_place": None,
            "weight": "same", "bias": True, "grad_bias": True, "grad_dtype": None, "rows_per_block": None,
            "own_workspace": False, "sizes": None, "per_row": False, "as_arrays": False,
            "out_dtype": "float8_e4m3fn", "mode": "static", "device_scale": False, "scale_ub": None,
            "round_input": False, "specials": False, "group_size": None, "ue8m0": False, "column_major": False,
            "sum_precision": None, "residual_dtype": None, "out_kind": "same", "norm_out": False,
            "grad_output_kind": "same", "rms": False, "rms_bias": False, "is_neox": True, "rotary_dim": None,
            "norm_before_gate": True, "kv_cache": False, "kv_cache_dtype": "auto", "cache_layout": "nhd"}
# out_kind: the output of a row op beside bf16/fp16 rows (plan.OUT_KINDS: "same", or "float32"; the checkers'
# out_dtype), apart from out_dtype, the quantizing ops' output dtype. grad_output_kind: a backward's
# grad_output, "same" or "float32" (beside an fp32 weight). rms: layer_norm's RMSNorm with a bias; rms_bias: its
# backward, rms_norm_backward with grad_bias. is_neox, rotary_dim: qk_norm_rope's rotation; kv_cache, kv_cache_dtype,
# cache_layout: its paged KV cache (device_scale: its scales read from memory). norm_before_gate: gated_rms_norm's
# order (group_size there: its groups of columns, the quantizing ops' scale groups elsewhere).
# The options a case of each op may set: its registry entry's case_options.
_OPTIONS = {name: spec.case_options for name, spec in registry.REGISTRY.items()}

# Sizes. Each list has prefix-only (1, 7), body-only (8, 4096, ...) and prefix+body+tail sizes (9, 769, 5125, 65537).
SANITIZE_HIDDENS = (1, 7, 9, 769, 5125, 16384, 65537)
GPU_HIDDENS = (1, 5, 7, 8, 9, 31, 769, 4096, 5120, 5125, 8192, 16384, 65536, 65537)  # edges, model sizes, 64 Ki
MISALIGNED_HIDDENS = (7, 769, 5125)  # every pointer at every offset: the sizes with a prefix, a body and a tail
MIXED_HIDDENS = (8, 9, 4096, 5120)
# (hidden, strides of the row operands in operands() order): longer than hidden, most not multiples of 8.
STRIDED = ((5120, (5123, 5131, 5127)), (769, (1001, 771, 800)), (16, (17, 19, 23)), (4096, (4104, 4099, 4096)))
IN_PLACE = ((5120, 0), (5125, 3), (20000, 1))  # (hidden, offset of the operand written over)
ROW_OPTIONS = ((True, False), (False, True), (True, True))  # (gemma, round_once)


def operands(op: str, *, in_place: str | None = None, bias: bool = True, weight: bool = True,
             out: bool = False, norm_out: bool = False, rms_bias: bool = False) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(row operands, vector operands) of a case of ``op``, named as tests.support.testing's checkers name them;
    an operand written in place over another is not separate, so it has no offset or stride. ``bias``:
    LayerNorm's bias (forward) or grad_bias (backward); ``weight`` False: weight=None (and no grad_weight);
    ``out``: fused add's fp32 out of its own (out_kind="float32"); ``norm_out``: the quantizing ops'
    unquantized output beside the quantized one; ``rms_bias``: RMSNorm's backward with grad_bias. The op's registry
    entry says which (its ``operands``)."""
    if op not in registry.REGISTRY:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    return registry.get(op).operands(in_place=in_place, bias=bias, weight=weight, out=out, norm_out=norm_out,
                                     rms_bias=rms_bias)


def pointers(op: str, **options) -> tuple[str, ...]:
    """Every operand with a pointer of its own, in the order the 'all misaligned differently' axes number
    them: rows then vectors (the backward passes: inputs, then outputs)."""
    rows, vectors = _operands_of(op, options)
    if op in BACKWARD:
        inputs = tuple(n for n in ("grad_output", "input", "weight") if n in rows + vectors)
        return inputs + tuple(n for n in rows + vectors if n not in inputs)
    return rows + vectors


def _operands_of(op: str, options: dict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return operands(op, in_place=options.get("in_place"), bias=options.get("grad_bias" if op in BACKWARD else "bias",
                                                                            True),
                    weight=options.get("weight", "same") != "none", out=options.get("out_kind", "same") != "same",
                    norm_out=options.get("norm_out", False), rms_bias=options.get("rms_bias", False))


def vector_elements(dtype, operand: str, *, weight: str = "same", grad_dtype: str | None = None,
                    out_kind: str = "same", grad_output_kind: str = "same", backward: bool = False) -> int:
    """Elements of a 16-byte vector in ``operand``'s own dtype (an fp32 weight, LayerNorm's fp32 bias beside
    it, or fp32 parameter gradients beside 2-byte rows count 4): its offsets 0 .. this - 1 are every
    misalignment it can have. An fp32 output beside 2-byte rows (out_kind="float32") counts 8: its vector
    of the rows' 8 elements is 32 bytes (plan.align_mask); so do a backward's fp32 weight (its columns
    split in vectors of the rows' 8) and fp32 grad_output."""
    if ((operand == "out" and out_kind != "same") or (operand == "grad_output" and grad_output_kind != "same")
            or (backward and operand == "weight" and weight == "float32")):
        return dtypes.get(dtype).vec_elems
    fp32 = (operand in ("weight", "bias") and weight == "float32") or (operand in ("grad_weight", "grad_bias")
                                                                        and grad_dtype == "float32")
    return (dtypes.FLOAT32 if fp32 else dtypes.get(dtype)).vec_elems


@dataclass(frozen=True)
class Case:
    """One checked launch, in canonical form: build it with ``case()``, which normalizes. offsets:
    (operand, elements past a 16-byte boundary), nonzero only; strides: (row operand, row stride in
    elements) where it is not dense (for rms_norm_nd, 'input' and 'out' carry the leading dimensions'
    strides and 'weight' a per-row weight's row stride); options: (name, value) away from DEFAULTS."""

    op: str
    dtype: str
    rows: int
    hidden: int
    offsets: tuple[tuple[str, int], ...] = ()
    strides: tuple[tuple[str, int | tuple[int, ...]], ...] = ()
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {OPS}, got {self.op!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES} (canonical names), got {self.dtype!r}")
        if self.rows < 1 or self.hidden < 1:
            raise ValueError(f"rows and hidden must be >= 1, got rows={self.rows}, hidden={self.hidden}")
        unknown = sorted(set(dict(self.options)) - set(_OPTIONS[self.op]))
        if unknown:
            raise ValueError(f"{self.op} takes the options {_OPTIONS[self.op]}, got {unknown}")
        rows, vectors = _operands_of(self.op, dict(self.options))
        # per_group's scales have a stride too (scale_stride: row-major rows, or column-major groups, padded)
        strided = rows + (("weight",) if self.option("per_row") else ()) + (("scale",) if self.op in QUANT else ())
        for kind, pairs, allowed in (("offsets", self.offsets, rows + vectors), ("strides", self.strides, strided)):
            bad = sorted({name for name, _ in pairs} - set(allowed))
            if bad:
                raise ValueError(f"{self.op} {kind}: unknown operands {bad}; these are {allowed}")
        canonical = _canonical(self.op, self.hidden, dict(self.offsets), dict(self.strides), dict(self.options))
        if canonical != (self.offsets, self.strides, self.options):
            raise ValueError(f"not in canonical form (build cases with case_matrix.case()): {self!r}")

    def option(self, name: str):
        """The value of option ``name``, its default where the case leaves it out."""
        return dict(self.options).get(name, DEFAULTS[name])

    def offset(self, operand: str) -> int:
        return dict(self.offsets).get(operand, 0)

    def stride(self, operand: str):
        """The operand's row stride (None: dense)."""
        return dict(self.strides).get(operand)

    def __str__(self) -> str:
        """A short name, as pytest shows it: op-dtype-ROWSxHIDDEN, then +offsets, /strides and options."""
        parts = [self.op, self.dtype, f"{self.rows}x{self.hidden}"]
        parts += [f"{name}+{off}" for name, off in self.offsets]
        parts += [f"{name}/{'x'.join(map(str, s)) if isinstance(s, tuple) else s}" for name, s in self.strides]
        parts += [f"{name}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for name, v in self.options]
        return "-".join(parts)


def _contiguous(sizes: tuple[int, ...], hidden: int) -> tuple[int, ...]:
    strides, step = [], hidden
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _canonical(op, hidden, offsets, strides, options):
    nd = "sizes" in _OPTIONS.get(op, ())  # an N-D entry point: the row operands' strides are its leading dimensions'
    dense = {name: _contiguous(options["sizes"], hidden) if nd and name != "weight" else hidden
             for name in strides} if strides else {}
    return (tuple(sorted((n, int(v)) for n, v in offsets.items() if v)),
            tuple(sorted((n, tuple(v) if isinstance(v, (tuple, list)) else v) for n, v in strides.items()
                         if v is not None and (tuple(v) if isinstance(v, (tuple, list)) else v) != dense[n])),
            tuple(sorted((n, tuple(v) if isinstance(v, list) else v) for n, v in options.items()
                         if v != DEFAULTS.get(n, object()) or n not in DEFAULTS)))


def case(op: str, dtype, rows: int | None, hidden: int, *, offsets: dict | None = None, strides: dict | None = None,
         **options) -> Case:
    """A Case in canonical form. ``dtype``: any name pyrms.dtypes.get accepts; ``rows``: None for
    rms_norm_nd (the product of ``sizes``); ``in_place=True`` means over the input; options not in
    DEFAULTS raise through Case."""
    if options.get("in_place") is True:
        options["in_place"] = "input"
    if "sizes" in _OPTIONS.get(op, ()):  # an N-D entry point's case: the rows are the leading sizes' product
        options["sizes"] = tuple(options["sizes"])
        rows = math.prod(options["sizes"])
    off, st, opts = _canonical(op, hidden, dict(offsets or {}), dict(strides or {}), options)
    return Case(op, dtypes.get(dtype).name, rows, hidden, off, st, opts)


def unique(cases: Iterable[Case]) -> tuple[Case, ...]:
    """The cases in order, each once."""
    return tuple(dict.fromkeys(cases))


def is_quick(c: Case) -> bool:
    """Whether every offset of the case is 0, 1 or VEC-1 (in the rows' dtype): the sanitizers' --quick."""
    n = dtypes.get(c.dtype).vec_elems
    return all(off in (0, 1, n - 1) for _, off in c.offsets)


# --- axes: each yields the cases of one kind of layout ---------------------------------------------


def misaligned(op, dtype, rows, hiddens, variants=(None,), **options) -> Iterator[Case]:
    """Each pointer alone at every element offset of its vector (0 .. VEC-1), per hidden size and row variant."""
    for hidden in hiddens:
        for name in pointers(op, **options):
            n = vector_elements(dtype, name, weight=options.get("weight", "same"), grad_dtype=options.get("grad_dtype"),
                                out_kind=options.get("out_kind", "same"),
                                grad_output_kind=options.get("grad_output_kind", "same"), backward=op in BACKWARD)
            for off in range(n):
                for variant in variants:
                    yield case(op, dtype, rows, hidden, offsets={name: off}, variant=variant, **options)


def sizes(op, dtype, hiddens, variants=(None,), **options) -> Iterator[Case]:
    """Each hidden size aligned (3 rows) and with every pointer one element off (2 rows)."""
    names = pointers(op, **options)
    for hidden in hiddens:
        for variant in variants:
            yield case(op, dtype, 3, hidden, variant=variant, **options)
            yield case(op, dtype, 2, hidden, offsets=dict.fromkeys(names, 1), variant=variant, **options)


def mixed(op, dtype, **options) -> Iterator[Case]:
    """Every pointer misaligned differently: the k-th at shift * (k + 1) mod VEC, for shifts 1, 2, 3, VEC-1."""
    n = dtypes.get(dtype).vec_elems
    names = pointers(op, **options)
    rows = 5 if op in BACKWARD else 2
    for shift in (1, 2, 3, n - 1):
        for hidden in MIXED_HIDDENS:
            yield case(op, dtype, rows, hidden, offsets={name: shift * (k + 1) % n for k, name in enumerate(names)},
                       **options)


def strided(op, dtype, row_counts, **options) -> Iterator[Case]:
    """STRIDED row strides at each row count, dense-aligned; then 5 rows with the k-th pointer k + 1 off."""
    rows_names = _operands_of(op, options)[0]
    for hidden, row_strides in STRIDED:
        st = dict(zip(rows_names, row_strides))
        for rows in row_counts:
            yield case(op, dtype, rows, hidden, strides=st, **options)
        yield case(op, dtype, 5, hidden, strides=st,
                   offsets={name: k + 1 for k, name in enumerate(pointers(op, **options))}, **options)


def in_place(op, dtype, rows, over="input", variants=(None,), **options) -> Iterator[Case]:
    """The output written over ``over``, at IN_PLACE's sizes and offsets."""
    for hidden, off in IN_PLACE:
        for variant in variants:
            yield case(op, dtype, rows, hidden, offsets={over: off}, in_place=over, variant=variant, **options)


# --- the GPU tests' axes: each op's own are in its tests' folder (tests.support.op_tests: OpTests.gpu) -------

ROW_VARIANTS = ("few", "many")  # the row core's kernels for few and for many rows
GPU_AXES = ("misaligned", "mixed", "sizes", "strided", "many_rows", "options", "in_place")


def forward_axes(op: str, dtype: str, axis: str, **options) -> Iterator[Case]:
    """The GPU axes a forward row op sweeps as the others do ('misaligned', 'mixed', 'sizes', 'strided'), with
    ``options``; nothing on the other axes (each op's own)."""
    if axis == "misaligned":
        yield from misaligned(op, dtype, 3, MISALIGNED_HIDDENS, ROW_VARIANTS, **options)
    elif axis == "mixed":
        yield from mixed(op, dtype, **options)
    elif axis == "sizes":
        yield from sizes(op, dtype, GPU_HIDDENS, ROW_VARIANTS, **options)
    elif axis == "strided":
        yield from strided(op, dtype, (7,), **options)


# Mixed precision beside bf16/fp16 rows: an fp32 weight with the rows' grad_output, and with an fp32 one.
FP32_WEIGHT = ({"weight": "float32"}, {"weight": "float32", "grad_output_kind": "float32"})


def gpu_backward(op: str, dtype: str, axis: str, *, layer_norm: bool) -> Iterator[Case]:
    """The GPU axes of RMSNorm's (or, ``layer_norm``, LayerNorm's) backward, the backward both share."""
    fp32 = FP32_WEIGHT if dtype != "float32" else ()
    if axis == "misaligned":
        yield from misaligned(op, dtype, 18, MISALIGNED_HIDDENS)  # two chunks of rows
        for options in fp32:
            yield from misaligned(op, dtype, 18, (769,), **options)
    elif axis == "mixed":
        yield from mixed(op, dtype)
        for options in fp32:
            yield from mixed(op, dtype, **options)
    elif axis == "sizes":
        yield from sizes(op, dtype, GPU_HIDDENS)
        for options in fp32:
            yield from sizes(op, dtype, (1, 9, 4096, 5125, 65537), **options)
    elif axis == "strided":
        yield from strided(op, dtype, (37,))
        for options in fp32:
            yield from strided(op, dtype, (37,), **options)
    elif axis == "many_rows":
        yield case(op, dtype, 70001, 9, offsets={"input": 1}, strides={"input": 11, "grad_output": 10})
        for options in fp32:  # the staged kernel over chunks of rows (an aligned weight), and the other one
            yield case(op, dtype, 3000, 4096, **options)
            yield case(op, dtype, 3000, 4096, offsets={"weight": 4}, **options)
    elif axis == "in_place":
        for over in ("grad_output", "input"):
            yield from in_place(op, dtype, 17, over)
    elif axis == "options":
        for hidden in (9, 5125, 16384):
            if layer_norm:
                yield case(op, dtype, 20, hidden, offsets={"grad_bias": 3, "weight": 1}, grad_dtype="float32")
                continue
            yield case(op, dtype, 20, hidden, gemma=True)
            yield case(op, dtype, 20, hidden, offsets={"grad_weight": 1}, grad_dtype="float32")
            yield case(op, dtype, 20, hidden, offsets={"input": 1, "weight": 2}, gemma=True, grad_dtype="float32")
            for options in fp32:
                yield case(op, dtype, 20, hidden, offsets={"weight": 5, "grad_output": 3}, gemma=True, **options)


def gpu_families() -> tuple[str, ...]:
    """The ops with GPU axes (OpTests.gpu), in the registry's order."""
    return tuple(name for name in registry.NAMES if op_tests.of(name).gpu is not None)


def gpu(family: str, axis: str) -> tuple[Case, ...]:
    """The cases of one GPU test axis (GPU_AXES) for a family, every dtype: 'misaligned' (each pointer at
    every offset), 'mixed' (all pointers off differently), 'sizes' (GPU_HIDDENS), 'strided', 'many_rows'
    (more than 65535), 'options', 'in_place'; empty where a family has no such axis; each case on the first
    axis that yields it. Kept small: the twin
    of a large rows x hidden costs seconds, and the whole GPU suite must fit its time limit."""
    if axis not in GPU_AXES:
        raise ValueError(f"axis must be one of {GPU_AXES}, got {axis!r}")
    make = op_tests.of(family).gpu if family in OPS else None
    if make is None:
        raise ValueError(f"the GPU axes cover {gpu_families()}, got {family!r}")
    # A case lies on the first axis that yields it (the aligned case of each size is on several): run once.
    earlier = {c for a in GPU_AXES[:GPU_AXES.index(axis)] for dtype in DTYPES for c in make(dtype, a)}
    return unique(c for dtype in DTYPES for c in make(dtype, axis) if c not in earlier)


# --- the sanitizer sweep (tools/sanitize_all.py): small enough to run under compute-sanitizer; each op's cases
# are in its tests' folder (OpTests.sanitize) ---------------------------------------------------------------------


def weight_kinds(dtype: str) -> Iterator[tuple[str, int]]:
    """(weight kind, the weight's offset in its own elements) of the weight variants beside the dtype's own."""
    yield "none", 0
    if dtype != "float32":
        yield "float32", 3


def over_sanitize_hiddens(cases_at, dtype: str) -> Iterator[Case]:
    """An op's sanitizer sweep of ``dtype``: ``cases_at(dtype, the dtype's vector elements, hidden)`` at every
    SANITIZE_HIDDENS size (an op's OpTests.sanitize as functools.partial(over_sanitize_hiddens, its cases_at))."""
    n = dtypes.get(dtype).vec_elems
    for hidden in SANITIZE_HIDDENS:
        yield from cases_at(dtype, n, hidden)


def sanitize_backward(op: str, dtype: str, *, layer_norm: bool) -> Iterator[Case]:
    """The sanitizer sweep's cases of RMSNorm's (or, ``layer_norm``, LayerNorm's) backward at every
    SANITIZE_HIDDENS size."""
    return over_sanitize_hiddens(lambda dt, n, hidden: _sanitize_backward(op, dt, n, hidden, layer_norm), dtype)


def _sanitize_backward(op: str, dtype: str, n: int, hidden: int, layer_norm: bool) -> Iterator[Case]:
    yield from misaligned(op, dtype, 18, (hidden,))
    yield case(op, dtype, 20, hidden, strides={"input": hidden + 3, "grad_output": hidden + 1}, in_place="grad_output",
               rows_per_block=32, own_workspace=True)
    if layer_norm:
        yield case(op, dtype, 17, hidden, offsets={"grad_weight": 1, "input": n - 1}, grad_bias=False)
    else:
        yield case(op, dtype, 5, hidden, gemma=True, grad_dtype="float32")
        yield case(op, dtype, 17, hidden, pdl=True)
        # with a bias: misaligned, chunks of rows with a partial last one, without a weight
        yield case(op, dtype, 18, hidden, offsets={"grad_bias": 1, "input": n - 1}, rms_bias=True)
        yield case(op, dtype, 33, hidden, offsets={"grad_bias": n - 1}, rows_per_block=16, rms_bias=True)
        yield case(op, dtype, 17, hidden, offsets={"input": 1}, weight="none", rms_bias=True)
    # strided with a partial last chunk of rows; in place over the input
    yield case(op, dtype, 33, hidden, offsets={"grad_input": n - 1},
               strides={"grad_input": hidden + 5, "grad_output": hidden + 2, "input": hidden + 1})
    yield case(op, dtype, 17, hidden, offsets={"input": n - 1}, strides={"input": hidden + 3}, in_place="input",
               grad_dtype="float32" if layer_norm else None)
    # without a weight: nothing summed, or (LayerNorm) dbias alone; and in place with an own workspace
    for grad_bias in (True, False) if layer_norm else (True,):
        yield case(op, dtype, 33, hidden, offsets={"grad_input": n - 1, "input": 1}, strides={"grad_output": hidden + 2},
                   weight="none", grad_bias=grad_bias)
    yield case(op, dtype, 17, hidden, offsets={"grad_output": 1}, weight="none", in_place="grad_output",
               own_workspace=True)
    if dtype != "float32":  # fp32 master weights: aligned (the staged kernel where hidden allows), and misaligned
        for options in FP32_WEIGHT:
            yield case(op, dtype, 18, hidden, **options)
            yield case(op, dtype, 33, hidden, offsets={"weight": n - 1, "grad_output": 1, "input": n - 1}, **options)


def sanitize(family: str, quick: bool = False) -> tuple[Case, ...]:
    """The sanitizer sweep's cases of a family (FAMILIES), every dtype: every element misalignment of
    every pointer at SANITIZE_HIDDENS, strided rows, in place, the options and weight kinds, both row
    variants; quick: only offsets 0, 1 and VEC-1 (is_quick), about half of them."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    cases = unique(c for dtype in DTYPES for c in op_tests.of(family).sanitize(dtype))
    return tuple(c for c in cases if is_quick(c)) if quick else cases


# --- the concurrency check and the soak ----------------------------------------------------------------


def concurrency_ops() -> tuple[str, ...]:
    """The ops the concurrency check runs: those with concurrency cases (OpTests.concurrency), in the registry's
    order."""
    return tuple(name for name in registry.NAMES if op_tests.of(name).concurrency is not None)


def concurrency(op: str) -> tuple[Case, ...]:
    """The launches of tools/concurrency_check.py, taken in turn (OpTests.concurrency): bf16 rows of one hidden
    size per op, every pointer through every misalignment 0..7 (at co-prime steps, so the pointers' offsets
    combine differently), several row counts, strided rows and several epsilons."""
    make = op_tests.of(op).concurrency if op in OPS else None
    if make is None:
        raise ValueError(f"the concurrency check runs {concurrency_ops()}, got {op!r}")
    return unique(make())


# tools/soak.py's operands: many launches of one shape, LayerNorm's kernel loaded under memory pressure, and
# a backward on a new stream per request; dense and aligned, as a server's tensors are.
SOAK = {"launches": case("rms_norm", "bfloat16", 8, 4096), "exhausted": case("layer_norm", "bfloat16", 4, 2051),
        "streams": case("rms_norm_backward", "bfloat16", 4, 1024)}

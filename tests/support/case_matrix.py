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
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator

from pyrms import dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops import registry

# The ops, from the registry: each case names one, and each is a family the sanitizer sweep reports under.
OPS = FAMILIES = registry.NAMES
BACKWARD = registry.with_check("backward")
QUANT = registry.with_check("quant")
STATIC_QUANT = registry.with_check("static_quant")  # standalone quantizers: no norm, no weight
DTYPES = tuple(d.name for d in dtypes.ALL)

# Every option a case may set, at its default (what the checkers of tests.support.testing take when it is left out).
DEFAULTS = {"epsilon": 1e-5, "variant": None, "pdl": None, "gemma": False, "round_once": False, "in_place": None,
            "weight": "same", "bias": True, "grad_bias": True, "grad_dtype": None, "rows_per_block": None,
            "own_workspace": False, "sizes": None, "per_row": False, "as_arrays": False,
            "out_dtype": "float8_e4m3fn", "mode": "static", "device_scale": False, "scale_ub": None,
            "round_input": False, "specials": False, "group_size": None, "ue8m0": False, "column_major": False,
            "sum_precision": None, "residual_dtype": None, "out_kind": "same", "norm_out": False,
            "grad_output_kind": "same", "rms": False, "rms_bias": False}
# out_kind: the output of a row op beside bf16/fp16 rows (plan.OUT_KINDS: "same", or "float32"; the checkers'
# out_dtype), apart from out_dtype, the quantizing ops' output dtype. grad_output_kind: a backward's
# grad_output, "same" or "float32" (beside an fp32 weight). rms: layer_norm's RMSNorm with a bias; rms_bias: its
# backward, rms_norm_backward with grad_bias.
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
    dense = {name: _contiguous(options["sizes"], hidden) if op == "rms_norm_nd" and name != "weight" else hidden
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
    if op == "rms_norm_nd":
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


# --- the GPU tests' axes ------------------------------------------------------------------------------

# The forward ops' configurations the GPU tests sweep: (op, options).
_FORWARD = {"fused_add_rms_norm": (("fused_add_rms_norm", {}),),
            "layer_norm": (("layer_norm", {}), ("layer_norm", {"bias": False}))}
_ROW_VARIANTS = ("few", "many")  # the row core's kernels for few and for many rows


def _gpu_rms_norm(dtype: str, axis: str) -> Iterator[Case]:
    n = dtypes.get(dtype).vec_elems
    op = "rms_norm"
    if axis == "misaligned":
        yield from misaligned(op, dtype, 3, MISALIGNED_HIDDENS, _ROW_VARIANTS)
    elif axis == "mixed":
        for in_off, w_off, out_off in ((1, 2, 3), (n - 1, 0, 1), (2, 2, 0), (3, n - 1, 3)):
            for hidden in MIXED_HIDDENS:
                yield case(op, dtype, 2, hidden, offsets={"input": in_off % n, "weight": w_off % n, "out": out_off % n})
    elif axis == "sizes":
        yield from sizes(op, dtype, sorted(GPU_HIDDENS + (32768, 32776)), (None, "many"))
        yield case(op, dtype, 2, 262144, offsets={"input": 3 % n})
    elif axis == "strided":
        yield from strided(op, dtype, (7, 300))  # 300: past plan.FEW_ROWS
    elif axis == "many_rows":
        yield case(op, dtype, 70001, 9, strides={"input": 11})
    elif axis == "options":
        for gemma, round_once in ROW_OPTIONS:
            yield case(op, dtype, 4, 5125, gemma=gemma, round_once=round_once)
            yield case(op, dtype, 4, 4096, offsets={"input": 1}, gemma=gemma, round_once=round_once, variant="many")
    elif axis == "in_place":
        yield from in_place(op, dtype, 3, variants=(None, "many"))


def _gpu_forward(family: str, dtype: str, axis: str) -> Iterator[Case]:
    for op, options in _FORWARD[family]:
        if axis == "misaligned":
            yield from misaligned(op, dtype, 3, MISALIGNED_HIDDENS, _ROW_VARIANTS, **options)
        elif axis == "mixed":
            yield from mixed(op, dtype, **options)
        elif axis == "sizes":
            yield from sizes(op, dtype, GPU_HIDDENS, _ROW_VARIANTS, **options)
        elif axis == "strided":
            yield from strided(op, dtype, (7,), **options)
    if family == "fused_add_rms_norm" and axis == "many_rows":
        yield case(family, dtype, 70001, 9, offsets={"residual": 1}, strides={"input": 11, "residual": 13})
    elif family == "fused_add_rms_norm" and axis == "options":
        for gemma, round_once in ROW_OPTIONS:
            yield case(family, dtype, 4, 5125, gemma=gemma, round_once=round_once)
            yield case(family, dtype, 4, 4096, offsets={"input": 1, "residual": 2}, gemma=gemma, round_once=round_once)
    elif family == "layer_norm" and axis == "many_rows":
        yield case(family, dtype, 70001, 9, strides={"input": 10})
    elif family == "layer_norm" and axis == "in_place":
        yield from in_place(family, dtype, 3)


# Mixed precision beside bf16/fp16 rows: an fp32 weight with the rows' grad_output, and with an fp32 one.
FP32_WEIGHT = ({"weight": "float32"}, {"weight": "float32", "grad_output_kind": "float32"})


def _gpu_backward(op: str, dtype: str, axis: str) -> Iterator[Case]:
    layer_norm = op == "layer_norm_backward"
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


GPU_AXES = ("misaligned", "mixed", "sizes", "strided", "many_rows", "options", "in_place")


def gpu(family: str, axis: str) -> tuple[Case, ...]:
    """The cases of one GPU test axis (GPU_AXES) for a family, every dtype: 'misaligned' (each pointer at
    every offset), 'mixed' (all pointers off differently), 'sizes' (GPU_HIDDENS), 'strided', 'many_rows'
    (more than 65535), 'options', 'in_place'; empty where a family has no such axis; each case on the first
    axis that yields it. Kept small: the twin
    of a large rows x hidden costs seconds, and the whole GPU suite must fit its time limit."""
    if axis not in GPU_AXES:
        raise ValueError(f"axis must be one of {GPU_AXES}, got {axis!r}")
    if family == "rms_norm":
        make = _gpu_rms_norm
    elif family in _FORWARD:
        make = lambda dtype, axis: _gpu_forward(family, dtype, axis)  # noqa: E731
    elif family in BACKWARD:
        make = lambda dtype, axis: _gpu_backward(family, dtype, axis)  # noqa: E731
    else:
        raise ValueError(f"the GPU axes cover {('rms_norm', *_FORWARD, *BACKWARD)}, got {family!r}")
    # A case lies on the first axis that yields it (the aligned case of each size is on several): run once.
    earlier = {c for a in GPU_AXES[:GPU_AXES.index(axis)] for dtype in DTYPES for c in make(dtype, a)}
    return unique(c for dtype in DTYPES for c in make(dtype, axis) if c not in earlier)


# --- the sanitizer sweep (tools/sanitize_all.py): small enough to run under compute-sanitizer ---------


def _weight_kinds(dtype: str) -> Iterator[tuple[str, int]]:
    """(weight kind, the weight's offset in its own elements) of the weight variants beside the dtype's own."""
    yield "none", 0
    if dtype != "float32":
        yield "float32", 3


def _sanitize_rms_norm(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "rms_norm"
    yield from misaligned(op, dtype, 2, (hidden,), _ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": 2}, strides={"input": hidden + 3, "out": hidden + 5})
    yield case(op, dtype, 2, hidden, offsets={"weight": n - 1}, gemma=True, round_once=True)
    for variant in (None, "many"):
        yield case(op, dtype, 2, hidden, offsets={"input": n - 1}, in_place=True, variant=variant)
    for variant in _ROW_VARIANTS:
        for weight, w_off in _weight_kinds(dtype):
            yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "weight": w_off, "out": 1}, weight=weight,
                       variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": 1}, variant=variant, pdl=True)
        if dtype != "float32":  # an fp32 output (offset 7: its 32-byte vector's last element), each weight kind
            for weight in ("same", "float32", "none"):
                yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "weight": int(weight != "none"), "out": 7},
                           weight=weight, variant=variant, out_kind="float32")


def _sanitize_fused_add(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "fused_add_rms_norm"
    yield from misaligned(op, dtype, 2, (hidden,), _ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, strides={"input": hidden + 3, "residual": hidden + 5}, gemma=True,
               round_once=True)
    for variant in _ROW_VARIANTS:
        for weight, w_off in _weight_kinds(dtype):
            yield case(op, dtype, 3, hidden, offsets={"input": 1, "residual": n - 1, "weight": w_off}, weight=weight,
                       variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"residual": n - 1}, variant=variant, pdl=True)
        if dtype != "float32":  # the fp32 sum normalized, and an fp32 residual (float32 rows have one semantics)
            for semantics, r_off in ((dict(sum_precision="fp32"), n - 1), (dict(residual_dtype="float32"), 3)):
                yield case(op, dtype, 3, hidden, offsets={"input": 1, "residual": r_off, "weight": 2},
                           strides={"residual": hidden + 3}, variant=variant, **semantics)
            # an fp32 out of its own (the rounded sum's out-of-place kernel), at its 32-byte vector's last element
            yield case(op, dtype, 3, hidden, offsets={"input": 1, "residual": n - 1, "out": 7, "weight": 1},
                       strides={"out": hidden + 1}, weight="float32", variant=variant, out_kind="float32")


def _sanitize_layer_norm(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "layer_norm"
    yield from misaligned(op, dtype, 2, (hidden,), _ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, offsets={"input": n - 1}, in_place=True)
    for variant in _ROW_VARIANTS:
        for bias in (True, False):  # without a weight, with and without bias
            yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": n - 1}, weight="none", bias=bias,
                       variant=variant)
        yield case(op, dtype, 3, hidden, variant=variant, pdl=True)
        if dtype != "float32":  # mixed dtypes: an fp32 output with each weight kind; fp32 weight and bias
            for weight in ("same", "float32", "none"):
                yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": 7, "weight": int(weight != "none")},
                           weight=weight, variant=variant, out_kind="float32")
            yield case(op, dtype, 3, hidden, offsets={"out": n - 1, "bias": 1}, weight="float32", variant=variant)
    yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": n - 1}, strides={"input": hidden + 3, "out": hidden + 5})
    yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "weight": 1}, strides={"out": hidden + 1}, bias=False)
    # RMSNorm with a bias: misaligned, strided, in place, without a weight, fp32 parameters and output
    for variant in _ROW_VARIANTS:
        yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": n - 1, "weight": 2, "bias": 3}, rms=True,
                   variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "bias": 1}, weight="none", rms=True, variant=variant)
    yield case(op, dtype, 3, hidden, offsets={"input": n - 1}, strides={"input": hidden + 3}, in_place=True, rms=True)
    if dtype != "float32":
        yield case(op, dtype, 3, hidden, offsets={"out": 7, "bias": 1}, weight="float32", out_kind="float32", rms=True)


def _sanitize_backward(op: str, dtype: str, n: int, hidden: int) -> Iterator[Case]:
    layer_norm = op == "layer_norm_backward"
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


def _sanitize_nd(dtype: str, n: int) -> Iterator[Case]:
    """QKV-like slices, transposed views, in place, a weight per outer row, the weight kinds; then many short
    plain rows (packed, 8 to 32 lanes a row: the ALIGNED packed variant where aligned)."""
    op = "rms_norm_nd"
    for hidden in (7, 64, 128, 130, 1000, 5125):
        row = 3 * hidden + 5  # a fused row: this slice's heads, then the others'
        qkv = {"input": (row, hidden)}
        for in_off, out_off in ((0, 0), (1, n - 1), (n - 1, 1)):
            yield case(op, dtype, None, hidden, offsets={"input": in_off, "out": out_off, "weight": in_off},
                       strides=qkv, sizes=(3, 2))
        yield case(op, dtype, None, hidden, offsets={"input": 1}, strides={"input": (6 * hidden, hidden, 3 * hidden)},
                   sizes=(2, 3, 2))
        yield case(op, dtype, None, hidden, offsets={"input": n - 1}, strides=qkv, sizes=(3, 2), in_place=True)
        yield case(op, dtype, None, hidden, offsets={"input": 1, "weight": 1}, strides={"weight": hidden + 1},
                   sizes=(3, 4), per_row=True)
        for weight, w_off in _weight_kinds(dtype):
            yield case(op, dtype, None, hidden, offsets={"input": 1, "weight": w_off}, strides=qkv, sizes=(3, 2),
                       weight=weight)
    for hidden in (64, 128, 1000):
        for in_off, out_off in ((0, 0), (1, n - 1)):
            yield case("rms_norm", dtype, plan.FEW_ROWS + 3, hidden, offsets={"input": in_off, "out": out_off})


def _sanitize_quant(op: str, dtype: str, n: int) -> Iterator[Case]:
    """Every output dtype and mode: input, weight, residual and the output each at offsets 1 and VEC-1 (the
    rows' vector) at hidden sizes with a prefix, a body and a tail (the static scale read from a device
    pointer); then a misaligned per-token scale, strided rows, NaN/inf rows and both row variants."""
    for out_dtype in dtypes.QUANTIZED:
        for mode in ("static", "per_token"):
            kind = dict(out_dtype=out_dtype.name, mode=mode)
            for hidden in MISALIGNED_HIDDENS:
                for name in operands(op)[0] + ("weight",):
                    for off in (1, n - 1):
                        yield case(op, dtype, 3, hidden, offsets={name: off}, device_scale=mode == "static", **kind)
            for variant in _ROW_VARIANTS:
                yield case(op, dtype, 5, 16384, offsets={"scale": 1}, strides={"input": 16387, "out": 16390},
                           specials=True, variant=variant, **kind)
        yield from _sanitize_group_quant(op, dtype, n, out_dtype.name)
    yield from _sanitize_norm_out(op, dtype, n)


def _sanitize_norm_out(op: str, dtype: str, n: int) -> Iterator[Case]:
    """The unquantized output beside each mode: at phases 1 and VEC-1 (its own split against x's), at x's
    phase (the held vectors' y), strided, with NaN/inf rows, both row variants."""
    for mode, group, hidden in (("static", None, 5125), ("per_token", None, 769), ("per_group", 64, 192)):
        kind = dict(mode=mode, group_size=group, norm_out=True)
        for off in (1, n - 1):
            yield case(op, dtype, 3, hidden, offsets={"norm_out": off}, **kind)
            yield case(op, dtype, 3, hidden, offsets={"norm_out": off, "input": off}, device_scale=mode == "static",
                       **kind)
        for variant in _ROW_VARIANTS:
            yield case(op, dtype, 5, hidden, strides={"norm_out": hidden + 3}, offsets={"input": 1}, specials=True,
                       variant=variant, **kind)


def _sanitize_group_quant(op: str, dtype: str, n: int, out_dtype: str) -> Iterator[Case]:
    """per_group: groups crossing the split (input and residual at phases 1 and VEC-1), a misaligned output
    and scales in both layouts (column-major padded, as DeepGEMM's), ue8m0, NaN/inf rows, both row variants,
    and the most groups a row may have."""
    kind = dict(out_dtype=out_dtype, mode="per_group")
    for group, hidden in ((64, 192), (128, 7168)):
        for name in operands(op)[0] + ("weight",):
            for off in (1, n - 1):
                yield case(op, dtype, 3, hidden, offsets={name: off}, group_size=group, **kind)
        for variant in _ROW_VARIANTS:
            for column_major in (False, True):
                yield case(op, dtype, 5, hidden, offsets={"scale": 1, "input": 1},
                           strides={"input": hidden + 3, "out": hidden + 5,
                                    "scale": 8 if column_major else hidden // group + 1},
                           column_major=column_major, ue8m0=column_major, specials=True, variant=variant,
                           group_size=group, **kind)
    yield case(op, dtype, 3, 65536, offsets={"input": 1}, group_size=64, **kind)


def _sanitize_static_quant(op: str, dtype: str, n: int) -> Iterator[Case]:
    """A standalone quantizer: input and out at phases 0, 1 and VEC-1 (out's in bytes, 0..15 sampled), a
    device scale at a misaligned fp32, strided rows with NaN/inf, every output dtype."""
    for out_dtype in dtypes.QUANTIZED:
        kind = dict(out_dtype=out_dtype.name)
        for hidden in (9, 5125):
            for off in (0, 1, n - 1):
                for out_off in (0, 1, 7, 15):
                    yield case(op, dtype, 3, hidden, offsets={"input": off, "out": out_off}, **kind)
        yield case(op, dtype, 3, 769, offsets={"scale": 1}, device_scale=True, **kind)
        yield case(op, dtype, 5, 769, offsets={"input": 1, "out": 3}, strides={"input": 772, "out": 775},
                   specials=True, **kind)


def _sanitize(family: str, dtype: str) -> Iterator[Case]:
    n = dtypes.get(dtype).vec_elems
    if family in STATIC_QUANT:
        yield from _sanitize_static_quant(family, dtype, n)
        return
    if family in QUANT:
        yield from _sanitize_quant(family, dtype, n)
        return
    if family == "rms_norm_nd":
        yield from _sanitize_nd(dtype, n)
        return
    if family == "seed_rms_norm":  # the inputs the seed accepts: aligned, dense, hidden / VEC_SIZE <= 1024
        for hidden in (769, 4096):  # VEC_SIZE 1 (769 threads) and 8/8/4 (512/512/1024 threads)
            yield case("seed_rms_norm", dtype, 3, hidden)
        return
    for hidden in SANITIZE_HIDDENS:
        if family == "rms_norm":
            yield from _sanitize_rms_norm(dtype, n, hidden)
        elif family == "fused_add_rms_norm":
            yield from _sanitize_fused_add(dtype, n, hidden)
        elif family == "layer_norm":
            yield from _sanitize_layer_norm(dtype, n, hidden)
        else:
            yield from _sanitize_backward(family, dtype, n, hidden)


def sanitize(family: str, quick: bool = False) -> tuple[Case, ...]:
    """The sanitizer sweep's cases of a family (FAMILIES), every dtype: every element misalignment of
    every pointer at SANITIZE_HIDDENS, strided rows, in place, the options and weight kinds, both row
    variants; quick: only offsets 0, 1 and VEC-1 (is_quick), about half of them."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    cases = unique(c for dtype in DTYPES for c in _sanitize(family, dtype))
    return tuple(c for c in cases if is_quick(c)) if quick else cases


# --- the concurrency check and the soak ----------------------------------------------------------------

CONCURRENCY_HIDDEN = {"rms_norm": 4099, "rms_norm_backward": 1027}


def concurrency(op: str) -> tuple[Case, ...]:
    """The launches of tools/concurrency_check.py, taken in turn: bf16 rows of CONCURRENCY_HIDDEN[op],
    every pointer through every misalignment 0..7 (at co-prime steps, so the pointers' offsets combine
    differently), 1 to 4 rows (rms_norm; plain and Gemma with round-once) or 1 to 33 (the backward: one
    to three 16-row chunks of the dweight sum), strided rows and several epsilons."""
    h = CONCURRENCY_HIDDEN.get(op)
    if h is None:
        raise ValueError(f"the concurrency check runs {tuple(CONCURRENCY_HIDDEN)}, got {op!r}")
    if op == "rms_norm":
        return unique(case(op, "bfloat16", 1 + k % 4, h, offsets={"input": k % 8, "weight": 3 * k % 8, "out": 5 * k % 8},
                           strides={"input": h + 5 + k % 3, "out": h + 3}, epsilon=1e-6 * (1 + k % 7),
                           gemma=k % 2 == 1, round_once=k % 2 == 1) for k in range(168))
    return unique(case(op, "bfloat16", 1 + k % 33, h,
                       offsets={"grad_output": 3 * k % 8, "input": k % 8, "weight": 5 * k % 8, "grad_input": 7 * k % 8,
                                "grad_weight": (k + 4) % 8},
                       strides={"grad_output": h + 3 + k % 2, "input": h + 3 + k % 2, "grad_input": h + 1},
                       epsilon=1e-6 * (1 + k % 3)) for k in range(264))


# tools/soak.py's operands: many launches of one shape, LayerNorm's kernel loaded under memory pressure, and
# a backward on a new stream per request; dense and aligned, as a server's tensors are.
SOAK = {"launches": case("rms_norm", "bfloat16", 8, 4096), "exhausted": case("layer_norm", "bfloat16", 4, 2051),
        "streams": case("rms_norm_backward", "bfloat16", 4, 1024)}

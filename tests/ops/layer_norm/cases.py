"""LayerNorm's pieces of the shared checks (tests.support.op_tests): the forward's checker on guarded operands, the
calls that run a case of the case matrix (the backward's checker is the one both norms share,
tests.support.testing.check_norm_backward), and the forward's raw call of the lab tools."""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

import pyrms
from pyrms import dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops._row_twin import row_stats_twin
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from tests.support.case_matrix import (ROW_VARIANTS, over_sanitize_hiddens, Case, case, forward_axes, gpu_backward, in_place,
                                       misaligned, sanitize_backward)
from tests.support.op_tests import OpTests, RawCall
from tests.support.testing import (allocate_named, backward_checker_call, case_label, closing, forced_row_variant,
                                   guarded, pdl_option, phases, row_kwargs, run_checked)


def check_layer_norm(rng, dtype, rows, hidden, *, offsets=None, strides=None, in_place=False, bias=True,
                     epsilon=1e-5, stream=None, variant=None, pdl=None, weight="same", out_dtype=None, rms=False,
                     stats_off=None):
    """One pyrms.layer_norm launch on guarded operands ('input', 'out', 'weight', 'bias'), compared bit
    for bit with the twin; in_place writes over the input (then 'out' takes no offset or stride);
    bias=False passes bias=None (a LayerNorm without bias), weight="none" weight=None ("same": the
    dtype's, "float32": fp32 weight and bias beside bf16/fp16 rows, as in check_rms_norm); ``out_dtype``
    as in check_rms_norm; rms: RMSNorm with a bias (layer_norm's rms=True). ``stats_off``: also store each row's
    statistics (``mean=`` and ``rstd=``; rstd alone with rms) into guarded float32 operands at this element
    offset, compared bit for bit with the row core twin's (None: none stored)."""
    from pyrms.ops.layer_norm import layer_norm

    if weight not in plan.WEIGHT_KINDS:
        raise ValueError(f"weight must be one of {plan.WEIGHT_KINDS}, got {weight!r}")
    dt = dtypes.get(dtype)
    odt = dt if out_dtype is None else dtypes.get(out_dtype)
    pdt = dtypes.FLOAT32 if weight == "float32" else dt
    names = ("input",) if in_place else ("input", "out")
    vectors = ("weight",) * (weight != "none") + ("bias",) * bool(bias)
    ops = allocate_named(rng, dt, rows, hidden, names, offsets, strides, vectors=vectors, outputs=("out",),
                         dtypes_of={"out": odt, "weight": pdt, "bias": pdt})
    x, w, b = ops["input"], ops.get("weight"), ops.get("bias")
    out = x if in_place else ops["out"]
    stat_names = () if stats_off is None else ("rstd",) if rms else ("mean", "rstd")
    stats = {name: guarded(np.float32, 1, rows, stats_off, None, np.nan) for name in stat_names}
    with closing(*ops.values(), *stats.values()):
        p = ln_plan.plan_layer_norm(dt, hidden, bias=bias, weight=weight != "none", rms=rms)
        want = ln_twin.layer_norm_twin(x.values(), w.values()[0] if w else None, b.values()[0] if b else None,
                                         epsilon, block=p.block, row_phases=phases(x), out_dtype=out_dtype, rms=rms)
        twin_stats = {}
        if stats:  # the forward's statistics: the row core's tree at the forward's fold
            twin_stats = dict(zip(("mean", "rstd"), row_stats_twin(x.values().astype(np.float32), epsilon, p.block,
                                                                   phases(x), dt.vec_elems, centered=not rms)))
        with forced_row_variant(variant):
            run_checked(case_label("layer_norm", dt, rows, hidden, offsets, strides, in_place=in_place,
                                   no_bias=not bias, weight=weight, variant=variant, pdl=pdl, out_dtype=out_dtype,
                                   rms=rms),
                        lambda: layer_norm(out.ptr, x.ptr, w.ptr if w else None, b.ptr if b else None, epsilon, rows,
                                           hidden, dtype=dt, input_stride=x.stride, out_stride=out.stride,
                                           stream=stream, weight_dtype="float32" if weight == "float32" else None,
                                           out_dtype=out_dtype, rms=rms, **{k: v.ptr for k, v in stats.items()},
                                           **pdl_option(pdl)),
                        outputs={"out": (out, want), **{k: (v, twin_stats[k][None]) for k, v in stats.items()}},
                        inputs={name: ops[name] for name in (*vectors, *(() if in_place else ("input",)))})


def _checker_call(case) -> tuple:
    opt = case.option
    return check_layer_norm, dict(
        row_kwargs(case, out=True), rows=case.rows, offsets=dict(case.offsets), strides=dict(case.strides),
        in_place=opt("in_place") == "input", bias=opt("bias"), variant=opt("variant"), rms=opt("rms"))


def _raw_launch(case, at, **common) -> None:
    pyrms.layer_norm(at["out"], at["input"], at["weight"], at["bias"], case.option("epsilon"), case.rows, case.hidden,
                     **common)


def _raw_twin(case, rows, positions) -> dict:
    block = ln_plan.plan_layer_norm(dtypes.get(case.dtype), case.hidden).block
    return {"out": ln_twin.layer_norm_twin(rows["input"], rows["weight"][0], rows["bias"][0], case.option("epsilon"),
                                           block=block, row_phases=positions["input"])}


# --- its cases of the case matrix


def _gpu(dtype: str, axis: str) -> Iterator[Case]:
    op = "layer_norm"
    for options in ({}, {"bias": False}):
        yield from forward_axes(op, dtype, axis, **options)
    if axis == "many_rows":
        yield case(op, dtype, 70001, 9, strides={"input": 10})
    elif axis == "in_place":
        yield from in_place(op, dtype, 3)


def _sanitize_at(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "layer_norm"
    yield from misaligned(op, dtype, 2, (hidden,), ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, offsets={"input": n - 1}, in_place=True)
    for variant in ROW_VARIANTS:
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
    for variant in ROW_VARIANTS:
        yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": n - 1, "weight": 2, "bias": 3}, rms=True,
                   variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "bias": 1}, weight="none", rms=True, variant=variant)
    yield case(op, dtype, 3, hidden, offsets={"input": n - 1}, strides={"input": hidden + 3}, in_place=True, rms=True)
    if dtype != "float32":
        yield case(op, dtype, 3, hidden, offsets={"out": 7, "bias": 1}, weight="float32", out_kind="float32", rms=True)


TESTS = {"layer_norm": OpTests(_checker_call, functools.partial(over_sanitize_hiddens, _sanitize_at), gpu=_gpu, raw=RawCall(("out",), _raw_launch, _raw_twin),
                               centered=True),
         "layer_norm_backward": OpTests(
             functools.partial(backward_checker_call, layer_norm=True),
             functools.partial(sanitize_backward, "layer_norm_backward", layer_norm=True),
             gpu=functools.partial(gpu_backward, "layer_norm_backward", layer_norm=True), centered=True)}

"""LayerNorm's pieces of the shared checks (tests.support.op_tests): the forward's and the quantizing forward's
checkers on guarded operands, the calls that run a case of the case matrix (the backward's checker is the one both
norms share, tests.support.testing.check_norm_backward), and the forward's raw call of the lab tools."""
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
                                   guarded, pdl_option, phases, put_specials, row_kwargs, run_checked)


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


def check_layer_norm_quant(rng, dtype, rows, hidden, out_dtype, *, offsets=None, strides=None, bias=True,
                           weight="same", epsilon=1e-5, round_input=False, scale=None, device_scale=False,
                           scale_array=False, specials=False, variant=None, stream=None, pdl=None):
    """One pyrms.layer_norm_quant launch on guarded operands ('input', 'out' in bytes, 'weight', 'bias', 'scale' in
    fp32 elements), out compared bit for bit with layer_norm_quant_twin. weight, bias: as check_layer_norm's
    ("float32": fp32 weight and bias beside bf16/fp16 rows, FlashInfer's). scale: the fp32 scale (default: drawn so
    that the largest outputs saturate); device_scale: read from a device pointer (scale_array: a one-element float32
    pyrms.Tensor there). specials: NaN, inf and -inf in row 0 (a NaN row) and an all-zero last row (a constant row).
    The output is poisoned with a byte the expected output does not hold; its guards and gaps, the input, weight,
    bias and the device scale must stay untouched."""
    from pyrms.ops.layer_norm import layer_norm_quant
    from pyrms.tensor import Tensor

    if weight not in plan.WEIGHT_KINDS:
        raise ValueError(f"weight must be one of {plan.WEIGHT_KINDS}, got {weight!r}")
    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    pdt = dtypes.FLOAT32 if weight == "float32" else dt
    vectors = ("weight",) * (weight != "none") + ("bias",) * bool(bias)
    ops = allocate_named(rng, dt, rows, hidden, ("input",), {k: v for k, v in offsets.items() if k in ("input", *vectors)},
                         {k: v for k, v in strides.items() if k == "input"}, vectors=vectors,
                         dtypes_of={"weight": pdt, "bias": pdt})
    x, w, b = ops["input"], ops.get("weight"), ops.get("bias")
    if specials:
        v = x.values().astype(np.float64)
        put_specials(rng, v)
        x.set_values(v.astype(dt.numpy))
        x.upload()
    if scale is None:
        scale = float(np.float32(rng.uniform(0.5, 1.5) * 4.0 / float(qt.qmax)))
    p = ln_plan.plan_layer_norm_quant(dt, hidden, qt, bias=bias, weight=weight != "none",
                                      weight_dtype=None if weight == "none" else pdt, round_input=round_input)
    q = ln_twin.layer_norm_quant_twin(x.values(), w.values()[0] if w else None, b.values()[0] if b else None, epsilon,
                                      scale, qt, block=p.block, row_phases=phases(x), round_input=round_input)
    q = q.view(np.uint8)
    # A poison byte the expected output does not hold; where it holds every byte, two launches under two poisons.
    unused = [byte for byte in (0xFF, 0x80, 0x55, 0xA5, 0x3C) if not np.any(q == byte)]
    with closing(*ops.values()):
        for poison in unused[:1] or [0x5A, 0xA5]:
            out = guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
            inputs, extra, scale_arg = dict(ops), [], scale
            if device_scale or scale_array:
                sc = guarded(np.float32, 1, 1, offsets.get("scale", 0), None, np.float32(scale))
                extra.append(sc)
                inputs["scale"] = sc
                scale_arg = Tensor(sc.ptr, (1,), dtypes.FLOAT32) if scale_array else sc.ptr
            label = case_label("layer_norm_quant", dt, rows, hidden, offsets, strides, out_dtype=qt.name, no_bias=not bias,
                               weight=weight, round_input=round_input, scale=scale, device_scale=device_scale,
                               scale_array=scale_array, specials=specials, variant=variant, pdl=pdl)
            with closing(out, *extra), forced_row_variant(variant):
                run_checked(label, lambda: layer_norm_quant(
                    out.ptr, x.ptr, w.ptr if w else None, b.ptr if b else None, epsilon, rows, hidden, scale=scale_arg,
                    out_dtype=qt, dtype=dt, input_stride=x.stride, out_stride=out.stride, stream=stream,
                    weight_dtype="float32" if weight == "float32" else None, round_input=round_input,
                    **pdl_option(pdl)), outputs={"out": (out, q)}, inputs=inputs)


def _quant_checker_call(case) -> tuple:
    opt = case.option
    return check_layer_norm_quant, dict(
        row_kwargs(case), rows=case.rows, out_dtype=opt("out_dtype"), offsets=dict(case.offsets),
        strides=dict(case.strides), bias=opt("bias"), round_input=opt("round_input"), device_scale=opt("device_scale"),
        specials=opt("specials"), variant=opt("variant"))


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


def _sanitize_quant_at(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    """The quantizing forward (offsets 1 and VEC-1 only, so the quick sweep keeps them all): input, weight, bias and
    out (in bytes: its split of Vec<T>::N bytes against the input's) misaligned for every output dtype; a misaligned device scale, strided rows with NaN/inf
    and a constant row, fp32 gamma and beta, without weight or bias; both row variants."""
    op = "layer_norm_quant"
    for variant in ROW_VARIANTS:
        for out_dtype in dtypes.QUANTIZED:
            yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": n - 1, "weight": n - 1, "bias": 1},
                       out_dtype=out_dtype.name, variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "out": 1, "scale": 1}, device_scale=True,
                   round_input=True, out_dtype="float8_e5m2", variant=variant)
        yield case(op, dtype, 5, hidden, offsets={"input": 1, "out": n - 1},
                   strides={"input": hidden + 3, "out": hidden + 5}, specials=True, out_dtype="int8", variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": 1}, weight="none", bias=False, variant=variant)
        if dtype != "float32":  # FlashInfer's combination: fp32 gamma and beta, the rounded value quantized
            yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "out": 1, "weight": 1, "bias": n - 1},
                       weight="float32", round_input=True, variant=variant)


TESTS = {"layer_norm": OpTests(_checker_call, functools.partial(over_sanitize_hiddens, _sanitize_at), gpu=_gpu, raw=RawCall(("out",), _raw_launch, _raw_twin),
                               centered=True),
         "layer_norm_backward": OpTests(
             functools.partial(backward_checker_call, layer_norm=True),
             functools.partial(sanitize_backward, "layer_norm_backward", layer_norm=True),
             gpu=functools.partial(gpu_backward, "layer_norm_backward", layer_norm=True), centered=True),
         "layer_norm_quant": OpTests(_quant_checker_call, functools.partial(over_sanitize_hiddens, _sanitize_quant_at),
                                     centered=True)}

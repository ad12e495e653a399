"""The fused add's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands and the
call that runs a case of the case matrix."""
from __future__ import annotations

import functools
from typing import Iterator

from pyrms import dtypes
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from tests.support.case_matrix import (ROW_OPTIONS, ROW_VARIANTS, over_sanitize_hiddens, Case, case, forward_axes,
                                       misaligned, weight_kinds)
from tests.support.op_tests import OpTests
from tests.support.testing import (allocate, allocate_named, case_label, closing, forced_row_variant, pdl_option,
                                   phases, row_kwargs, run_checked, weight_args, weight_operand)


def check_fused_add_rms_norm(rng, dtype, rows, hidden, *, offsets=None, strides=None, gemma=False, round_once=False,
                             epsilon=1e-5, stream=None, variant=None, pdl=None, weight="same", sum_precision=None,
                             residual_dtype=None, out_dtype=None):
    """One pyrms.fused_add_rms_norm launch on guarded operands ('input', 'residual', 'weight'; offsets
    and strides by name), both in-place outputs compared bit for bit with the twin; ``weight`` as in
    check_rms_norm; ``sum_precision`` and ``residual_dtype`` (float32: an fp32 residual, its offset in
    its own elements) passed to the op. ``out_dtype="float32"``: the normalized rows go to an fp32 'out'
    of their own (offsets and strides by name too; the rounded sum only), input must stay as it was."""
    from pyrms.ops.fused_add_rms_norm import fused_add_rms_norm

    dt = dtypes.get(dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    w_off, r_off, r_stride = offsets.pop("weight", 0), offsets.pop("residual", 0), strides.pop("residual", None)
    mixed = out_dtype is not None and dtypes.get(out_dtype) is not dt
    o_off, o_stride = offsets.pop("out", 0), strides.pop("out", None)
    p = fused_plan.plan_fused_add_rms_norm(dt, hidden, gemma=gemma, round_once=round_once, sum_precision=sum_precision,
                                     residual_dtype=residual_dtype, out_dtype=out_dtype)
    x = allocate_named(rng, dt, rows, hidden, ("input",), offsets, strides)["input"]
    res = allocate(rng, p.residual_dtype, rows, hidden, misalign=r_off, stride=r_stride)
    w = weight_operand(rng, dt, hidden, weight, w_off)
    o = allocate(rng, out_dtype, rows, hidden, misalign=o_off, stride=o_stride, poison=True) if mixed else None
    w_ptr, w_values, w_dtype = weight_args(w, weight)
    with closing(x, res, *([w] if w else []), *([o] if o else [])):
        out, total = fused_twin.fused_add_rms_norm_twin(x.values(), res.values(), w_values, epsilon, block=p.block,
                                                       residual_phases=phases(res), input_phases=phases(x),
                                                       gemma=gemma, round_once=round_once,
                                                       sum_precision=p.sum_precision,
                                                       out_dtype=out_dtype if mixed else None)
        with forced_row_variant(variant):
            run_checked(case_label("fused_add_rms_norm", dt, rows, hidden,
                                   {**offsets, "residual": r_off, **({"out": o_off} if o else {})},
                                   {**strides, "residual": res.stride, **({"out": o.stride} if o else {})}, gemma=gemma,
                                   round_once=round_once, variant=variant, pdl=pdl, weight=weight,
                                   sum_precision=p.sum_precision, residual=p.residual_dtype.name,
                                   out_dtype=out_dtype if mixed else None),
                        lambda: fused_add_rms_norm(x.ptr, res.ptr, w_ptr, epsilon, rows, hidden, dtype=dt,
                                                   input_stride=x.stride, residual_stride=res.stride, gemma=gemma,
                                                   round_once=round_once, stream=stream, weight_dtype=w_dtype,
                                                   sum_precision=sum_precision, residual_dtype=residual_dtype,
                                                   out_dtype=out_dtype if mixed else None,
                                                   out=o.ptr if o else None, out_stride=o.stride if o else None,
                                                   **pdl_option(pdl)),
                        outputs={"out" if o else "input": (o or x, out), "residual": (res, total)},
                        inputs={**({"weight": w} if w else {}), **({"input": x} if o else {})})


def _checker_call(case) -> tuple:
    opt = case.option
    return check_fused_add_rms_norm, dict(
        row_kwargs(case, out=True), rows=case.rows, offsets=dict(case.offsets), strides=dict(case.strides),
        gemma=opt("gemma"), round_once=opt("round_once"), variant=opt("variant"), sum_precision=opt("sum_precision"),
        residual_dtype=opt("residual_dtype"))


# --- its cases of the case matrix


def _gpu(dtype: str, axis: str) -> Iterator[Case]:
    op = "fused_add_rms_norm"
    yield from forward_axes(op, dtype, axis)
    if axis == "many_rows":
        yield case(op, dtype, 70001, 9, offsets={"residual": 1}, strides={"input": 11, "residual": 13})
    elif axis == "options":
        for gemma, round_once in ROW_OPTIONS:
            yield case(op, dtype, 4, 5125, gemma=gemma, round_once=round_once)
            yield case(op, dtype, 4, 4096, offsets={"input": 1, "residual": 2}, gemma=gemma, round_once=round_once)


def _sanitize_at(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "fused_add_rms_norm"
    yield from misaligned(op, dtype, 2, (hidden,), ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, strides={"input": hidden + 3, "residual": hidden + 5}, gemma=True,
               round_once=True)
    for variant in ROW_VARIANTS:
        for weight, w_off in weight_kinds(dtype):
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


TESTS = {"fused_add_rms_norm": OpTests(_checker_call, functools.partial(over_sanitize_hiddens, _sanitize_at), gpu=_gpu)}

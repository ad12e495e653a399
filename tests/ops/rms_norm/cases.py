"""RMSNorm's pieces of the shared checks (tests.support.op_tests): its checkers on guarded operands, the call that
runs a case of the case matrix, and the raw call of the lab tools."""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

import pyrms
from pyrms import driver, dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops._row_twin import row_stats_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from tests.support.case_matrix import (GPU_HIDDENS, MISALIGNED_HIDDENS, MIXED_HIDDENS, ROW_OPTIONS, ROW_VARIANTS,
                                       over_sanitize_hiddens, Case, case, in_place, misaligned, sizes, strided, weight_kinds)
from tests.support.op_tests import OpTests, RawCall
from tests.support.testing import (allocate, closing, forced_row_variant, guarded, pdl_option, phases, row_kwargs,
                                   run_checked, weight_args, weight_operand)


def check_rms_norm(rng, dtype, rows, hidden, *, in_off=0, w_off=0, out_off=0, in_stride=None, out_stride=None,
                   gemma=False, round_once=False, in_place=False, epsilon=1e-5, stream=None, variant=None,
                   pdl=None, weight="same", out_dtype=None, rstd_off=None):
    """One pyrms.rms_norm launch on guarded operands, compared bit for bit with the twin.

    Raises AssertionError on any difference: in the rows, the guards, the gaps between strided
    rows, or the inputs. The offsets are element offsets past a 16-byte boundary (the weight's in its
    own elements). ``variant`` forces the kernel for "few" or "many" rows (plan.FEW_ROWS) whatever
    ``rows`` is (as for the other row ops' checks); ``pdl`` is passed to the op (None: the op's
    default), as for the others; ``weight``: "same" (the dtype's), "float32" or "none" (weight=None);
    ``out_dtype``: the output's (None: the dtype; "float32" beside bf16/fp16 rows, out_off then in fp32
    elements past a 16-byte boundary, 0..7 covering its 32-byte vectors). ``rstd_off``: also store each row's
    inv_rms (``rstd=``) into a guarded float32 operand at this element offset, compared bit for bit with the
    row core twin's statistics (None: no rstd).
    """
    from pyrms.ops.rms_norm import rms_norm

    dt = dtypes.get(dtype)
    odt = dt if out_dtype is None else dtypes.get(out_dtype)
    x = allocate(rng, dt, rows, hidden, misalign=in_off, stride=in_stride)
    w = weight_operand(rng, dt, hidden, weight, w_off)
    out = x if in_place else allocate(rng, odt, rows, hidden, misalign=out_off, stride=out_stride, poison=True)
    w_ptr, w_values, w_dtype = weight_args(w, weight)
    rstd = None if rstd_off is None else guarded(np.float32, 1, rows, rstd_off, None, np.nan)
    with closing(x, out, *([w] if w else []), *([rstd] if rstd else [])):
        p = rms_plan.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        want = rms_twin.rms_norm_twin(x.values(), w_values, epsilon, block=p.block, row_phases=phases(x),
                                       gemma=gemma, round_once=round_once, out_dtype=out_dtype)
        outputs = {"out": (out, want)}
        if rstd:  # the forward's statistics: the row core's tree at the forward's fold
            outputs["rstd"] = (rstd, row_stats_twin(x.values().astype(np.float32), epsilon, p.block, phases(x),
                                                    dt.vec_elems)[1][None])
        with forced_row_variant(variant):
            run_checked(f"rms_norm {dt.name} rows={rows} hidden={hidden} offsets={in_off},{w_off},{out_off} "
                        f"strides={x.stride},{out.stride} variant={variant} pdl={pdl} weight={weight} out={odt.name}"
                        f" rstd_off={rstd_off}",
                        lambda: rms_norm(out.ptr, x.ptr, w_ptr, epsilon, rows, hidden, dtype=dt, input_stride=x.stride,
                                         out_stride=out.stride, gemma=gemma, round_once=round_once, stream=stream,
                                         weight_dtype=w_dtype, out_dtype=out_dtype, rstd=rstd.ptr if rstd else None,
                                         **pdl_option(pdl)),
                        outputs=outputs,
                        inputs={**({"weight": w} if w else {}), **({} if in_place else {"input": x})})


def check_rms_norm_nd(rng, dtype, sizes, hidden, *, in_strides=None, out_strides=None, in_off=0, out_off=0, w_off=0,
                      weight="same", per_row=False, w_stride=None, in_place=False, gemma=False, round_once=False,
                      epsilon=1e-5, as_arrays=False, stream=None, pdl=None, out_dtype=None):
    """One pyrms.rms_norm launch on guarded N-D views [*sizes, hidden] (element strides along the
    leading dimensions; default contiguous), compared bit for bit with the twin as check_rms_norm.
    ``per_row``: a weight per outer row, [sizes[0], hidden] of row stride ``w_stride`` (default hidden).
    ``as_arrays``: pass pyrms Tensor views instead of raw pointers and tuples (the arrays' path, which
    collapses the leading dimensions itself); ``out_dtype`` as in check_rms_norm."""
    from pyrms.ops._views import contiguous
    from pyrms.ops.rms_norm import rms_norm
    from pyrms.tensor import Tensor

    dt = dtypes.get(dtype)
    sizes = tuple(sizes)
    in_strides = tuple(in_strides or contiguous(sizes, hidden))
    out_strides = in_strides if in_place else tuple(out_strides or contiguous(sizes, hidden))
    x = allocate(rng, dt, 0, hidden, misalign=in_off, lead=(sizes, in_strides))
    odt = dt if out_dtype is None else dtypes.get(out_dtype)
    out = x if in_place else allocate(rng, odt, 0, hidden, misalign=out_off, poison=True, lead=(sizes, out_strides))
    w = weight_operand(rng, dt, hidden, weight, w_off, sizes[0] if per_row else 1,
                       (w_stride or hidden) if per_row else None)
    with closing(x, out, *([w] if w else [])):
        p = rms_plan.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        w_values = None
        if w is not None:
            w_values = np.repeat(w.values(), x.rows // sizes[0], axis=0) if per_row else w.values()[0]
        want = rms_twin.rms_norm_twin(x.values(), w_values, epsilon, block=p.block, row_phases=phases(x),
                                       gemma=gemma, round_once=round_once, out_dtype=out_dtype)
        options = dict(gemma=gemma, round_once=round_once, stream=stream, **pdl_option(pdl))
        if as_arrays:
            def view(op, strides, dtype_=dt, shape=(*sizes, hidden)):
                return Tensor(op.ptr, shape, dtype_, (*strides, 1), driver.selected_device().ordinal, owner=op)

            w_arg = None
            if w is not None:
                w_arg = (view(w, (w.stride,), w.host.dtype, (sizes[0], hidden)) if per_row
                         else view(w, (), w.host.dtype, (hidden,)))
            launch = lambda: rms_norm(view(out, out_strides, odt), view(x, in_strides), w_arg, epsilon,  # noqa: E731
                                      **options)
        else:
            w_dtype = "float32" if weight == "float32" else None
            launch = lambda: rms_norm(out.ptr, x.ptr, w.ptr if w else None, epsilon, sizes, hidden,  # noqa: E731
                                      dtype=dt, input_stride=in_strides, out_stride=out_strides, weight_dtype=w_dtype,
                                      weight_stride=w.stride if per_row and w else None, out_dtype=out_dtype,
                                      **options)
        run_checked(f"rms_norm N-D {dt.name} sizes={sizes} hidden={hidden} strides={in_strides},{out_strides} "
                    f"offsets={in_off},{w_off},{out_off} weight={weight} per_row={per_row} in_place={in_place} "
                    f"arrays={as_arrays} out={odt.name}", launch, outputs={"out": (out, want)},
                    inputs={**({"weight": w} if w else {}), **({} if in_place else {"input": x})})


def _checker_call(case) -> tuple:
    o, s, opt = case.offset, case.stride, case.option
    return check_rms_norm, dict(
        row_kwargs(case, out=True), rows=case.rows, in_off=o("input"), w_off=o("weight"), out_off=o("out"),
        in_stride=s("input"), out_stride=s("out"), gemma=opt("gemma"), round_once=opt("round_once"),
        in_place=opt("in_place") == "input", variant=opt("variant"))


def _nd_checker_call(case) -> tuple:
    o, s, opt = case.offset, case.stride, case.option
    return check_rms_norm_nd, dict(
        row_kwargs(case, out=True), sizes=opt("sizes"), in_strides=s("input"), out_strides=s("out"),
        in_off=o("input"), out_off=o("out"), w_off=o("weight"), per_row=opt("per_row"), w_stride=s("weight"),
        in_place=opt("in_place") == "input", gemma=opt("gemma"), round_once=opt("round_once"),
        as_arrays=opt("as_arrays"))


def _raw_launch(case, at, **common) -> None:
    s = case.stride
    pyrms.rms_norm(at["out"], at["input"], at["weight"], case.option("epsilon"), case.rows, case.hidden,
                   input_stride=s("input"), out_stride=s("out"), gemma=case.option("gemma"),
                   round_once=case.option("round_once"), **common)


def _raw_twin(case, rows, positions) -> dict:
    gemma, round_once = case.option("gemma"), case.option("round_once")
    block = rms_plan.plan_rms_norm(dtypes.get(case.dtype), case.hidden, gemma=gemma, round_once=round_once).block
    return {"out": rms_twin.rms_norm_twin(rows["input"], rows["weight"][0], case.option("epsilon"), block=block,
                                          row_phases=positions["input"], gemma=gemma, round_once=round_once)}


# --- its cases of the case matrix


def _gpu(dtype: str, axis: str) -> Iterator[Case]:
    n = dtypes.get(dtype).vec_elems
    op = "rms_norm"
    if axis == "misaligned":
        yield from misaligned(op, dtype, 3, MISALIGNED_HIDDENS, ROW_VARIANTS)
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


def _sanitize_at(dtype: str, n: int, hidden: int) -> Iterator[Case]:
    op = "rms_norm"
    yield from misaligned(op, dtype, 2, (hidden,), ROW_VARIANTS)
    yield case(op, dtype, 3, hidden, offsets={"input": 1, "out": 2}, strides={"input": hidden + 3, "out": hidden + 5})
    yield case(op, dtype, 2, hidden, offsets={"weight": n - 1}, gemma=True, round_once=True)
    for variant in (None, "many"):
        yield case(op, dtype, 2, hidden, offsets={"input": n - 1}, in_place=True, variant=variant)
    for variant in ROW_VARIANTS:
        for weight, w_off in weight_kinds(dtype):
            yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "weight": w_off, "out": 1}, weight=weight,
                       variant=variant)
        yield case(op, dtype, 3, hidden, offsets={"input": 1}, variant=variant, pdl=True)
        if dtype != "float32":  # an fp32 output (offset 7: its 32-byte vector's last element), each weight kind
            for weight in ("same", "float32", "none"):
                yield case(op, dtype, 3, hidden, offsets={"input": n - 1, "weight": int(weight != "none"), "out": 7},
                           weight=weight, variant=variant, out_kind="float32")


def _sanitize_nd(dtype: str) -> Iterator[Case]:
    """QKV-like slices, transposed views, in place, a weight per outer row, the weight kinds; then many short
    plain rows (packed, 8 to 32 lanes a row: the ALIGNED packed variant where aligned)."""
    n = dtypes.get(dtype).vec_elems
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
        for weight, w_off in weight_kinds(dtype):
            yield case(op, dtype, None, hidden, offsets={"input": 1, "weight": w_off}, strides=qkv, sizes=(3, 2),
                       weight=weight)
    for hidden in (64, 128, 1000):
        for in_off, out_off in ((0, 0), (1, n - 1)):
            yield case("rms_norm", dtype, plan.FEW_ROWS + 3, hidden, offsets={"input": in_off, "out": out_off})


def _concurrency() -> Iterator[Case]:
    """bf16 rows of 4099, 1 to 4 rows, plain and Gemma with round-once."""
    op, h = "rms_norm", 4099
    return (case(op, "bfloat16", 1 + k % 4, h, offsets={"input": k % 8, "weight": 3 * k % 8, "out": 5 * k % 8},
                 strides={"input": h + 5 + k % 3, "out": h + 3}, epsilon=1e-6 * (1 + k % 7), gemma=k % 2 == 1,
                 round_once=k % 2 == 1) for k in range(168))


TESTS = {"rms_norm": OpTests(_checker_call, functools.partial(over_sanitize_hiddens, _sanitize_at), gpu=_gpu, concurrency=_concurrency,
                             raw=RawCall(("out",), _raw_launch, _raw_twin)),
         "rms_norm_nd": OpTests(_nd_checker_call, _sanitize_nd)}

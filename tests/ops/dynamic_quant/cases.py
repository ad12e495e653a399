"""The dynamic quantizer's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands
and the call that runs a case of the case matrix."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import dtypes
from tests.support.case_matrix import Case, case
from tests.support.op_tests import OpTests
from tests.support.testing import allocate, case_label, closing, guarded, pdl_option, put_specials, run_checked

MODES = ("per_tensor", "per_token", "per_group")


def check_dynamic_quant(rng, dtype, rows, hidden, out_dtype, mode, *, offsets=None, strides=None, group_size=None,
                        ue8m0=False, column_major=False, scale_stride=None, scale_ub=None, scale_array=False,
                        specials=False, stream=None, pdl=None):
    """One pyrms.dynamic_quant call on guarded operands, out and the scales compared bit for bit with
    dynamic_quant_twin.

    offsets: 'input' (elements past a 16-byte boundary), 'out' (bytes), 'scale' and 'scale_ub' (fp32 elements);
    strides: 'input', 'out' (elements; default hidden). Per group: group_size, ue8m0, column_major and
    scale_stride (the row stride of row-major scales, the group stride of column-major ones; the padding must
    stay poisoned). scale_ub (per token, float8): None, a float, or "device" (a device pointer to a drawn value).
    scale_array: the scales passed as a float32 pyrms.Tensor over the same memory. specials: NaN, inf and -inf in
    row 0 and an all-zero last row. Each row's magnitude is drawn over many binades, so the scales differ; the
    output is poisoned with a byte the expected output does not hold, the scales with NaN (never a scale); the
    guards, gaps, the input and a device scale_ub must stay untouched."""
    from pyrms.ops.dynamic_quant import dynamic_quant
    from pyrms.ops.dynamic_quant.twin import dynamic_quant_twin
    from pyrms.tensor import Tensor

    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    x = allocate(rng, dt, rows, hidden, misalign=offsets.get("input", 0), stride=strides.get("input"))
    v = rng.uniform(-1.0, 1.0, (rows, hidden)) * np.exp2(rng.uniform(-14.0, 3.0, (rows, hidden)))
    v *= np.exp2(rng.uniform(-6.0, 6.0, (rows, 1)))
    if specials:
        put_specials(rng, v)
    x.set_values(v.astype(dt.numpy))
    x.upload()
    ub = None if scale_ub is None else float(np.float32(rng.uniform(0.5, 4.0) if scale_ub == "device" else scale_ub))
    grouping = dict(group_size=group_size, ue8m0=ue8m0, column_major=column_major) if mode == "per_group" else {}
    q, scales = dynamic_quant_twin(x.values(), qt, mode, scale_ub=ub, **grouping)
    q = q.view(np.uint8)
    # the scales as they lie in memory: one row of one or num_tokens, or per group (rows, groups) or its transpose
    laid = scales.T if column_major else (scales if mode == "per_group" else scales[None])
    unused = [b for b in (0xFF, 0x80, 0x55, 0xA5, 0x3C) if not np.any(q == b)]
    with closing(x):
        for poison in unused[:1] or [0x5A, 0xA5]:
            out = guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
            sc = guarded(np.float32, *laid.shape, offsets.get("scale", 0), scale_stride, np.nan)
            inputs, extra, ub_arg = {"input": x}, [sc], ub
            if scale_ub == "device":
                ub_op = guarded(np.float32, 1, 1, offsets.get("scale_ub", 0), None, np.float32(ub))
                extra.append(ub_op)
                inputs["scale_ub"], ub_arg = ub_op, ub_op.ptr
            scale_arg = sc.ptr
            if scale_array:
                shape, step = (scales.shape, (1, sc.stride) if column_major else (sc.stride, 1)) if \
                    mode == "per_group" else (scales.shape, None)
                scale_arg = Tensor(sc.ptr, shape, dtypes.FLOAT32, strides=step)
            kwargs = dict(scale=scale_arg, mode=mode, out_dtype=qt, dtype=dt, scale_ub=ub_arg, input_stride=x.stride,
                          out_stride=out.stride, stream=stream, **pdl_option(pdl))
            if mode == "per_group":
                kwargs.update(group_size=group_size, ue8m0=ue8m0, column_major_scales=column_major,
                              scale_stride=None if scale_array else scale_stride)
            label = case_label("dynamic_quant", dt, rows, hidden, offsets, strides, out_dtype=qt.name, mode=mode,
                               scale_ub=scale_ub, scale_array=scale_array, specials=specials, pdl=pdl, **grouping)
            with closing(out, *extra):
                run_checked(label, lambda: dynamic_quant(out.ptr, x.ptr, rows, hidden, **kwargs),
                            outputs={"out": (out, q), "scale": (sc, laid)}, inputs=inputs)


def _checker_call(case) -> tuple:
    opt = case.option
    return check_dynamic_quant, dict(
        dtype=case.dtype, hidden=case.hidden, rows=case.rows, out_dtype=opt("out_dtype"), mode=opt("mode"),
        offsets=dict(case.offsets), strides=dict(case.strides), group_size=opt("group_size"), ue8m0=opt("ue8m0"),
        column_major=opt("column_major"), scale_ub=opt("scale_ub"), specials=opt("specials"), pdl=opt("pdl"))


# --- its cases of the case matrix


def _sanitize(dtype: str) -> Iterator[Case]:
    """Every mode and output dtype: input and out at phases 0, 1 and VEC-1 (out's in bytes, 0..15 sampled) at a
    hidden size with a prefix, body and tail (per group: 1280 = 10 groups of 128, 20 of 64); misaligned scales and
    a device scale_ub; strided rows with NaN/inf and an all-zero row; per tensor over more rows than blocks of the
    maxima launch; per group in both scale layouts and with ue8m0."""
    op, n = "dynamic_quant", dtypes.get(dtype).vec_elems
    for out_dtype in dtypes.QUANTIZED:
        for mode in MODES:
            kind = dict(out_dtype=out_dtype.name, mode=mode)
            hidden = 1280 if mode == "per_group" else 5125
            for off in (0, 1, n - 1):
                for out_off in (0, 1, 7, 15):
                    yield case(op, dtype, 3, hidden, offsets={"input": off, "out": out_off}, **kind)
            yield case(op, dtype, 5, hidden if mode == "per_group" else 769, offsets={"input": 1, "out": 3},
                       strides={"input": hidden + 3, "out": hidden + 6}, specials=True, **kind)
            yield case(op, dtype, 3, 256 if mode == "per_group" else 9, offsets={"scale": 1}, **kind)
        yield case(op, dtype, 1100, 9, offsets={"input": 1}, out_dtype=out_dtype.name, mode="per_tensor")
        for column_major in (False, True):
            yield case(op, dtype, 5, 1280, offsets={"input": 1, "out": 5, "scale": 3}, out_dtype=out_dtype.name,
                       mode="per_group", group_size=64, column_major=column_major, ue8m0=True)
        if not out_dtype.integer:
            yield case(op, dtype, 3, 769, offsets={"scale_ub": 1}, out_dtype=out_dtype.name, mode="per_token",
                       scale_ub="device")


TESTS = {"dynamic_quant": OpTests(_checker_call, _sanitize)}

"""The standalone quantizer's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands
and the call that runs a case of the case matrix."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import dtypes
from tests.support.case_matrix import Case, case
from tests.support.op_tests import OpTests
from tests.support.testing import allocate, case_label, closing, guarded, pdl_option, put_specials, run_checked


def check_static_quant(rng, dtype, rows, hidden, out_dtype, *, offsets=None, strides=None, scale=None,
                       device_scale=False, scale_array=False, specials=False, stream=None, pdl=None):
    """One pyrms.static_quant launch on guarded operands, out compared bit for bit with static_quant_twin.

    offsets: 'input' (elements past a 16-byte boundary), 'out' (bytes), 'scale' (fp32 elements, a device
    scale's); strides: 'input', 'out' (elements; default hidden). scale: the fp32 scale (default: drawn so that
    the largest inputs saturate and the smallest round to zero or a subnormal). device_scale: read from a
    device pointer (scale_array: a one-element float32 pyrms.Tensor there). specials: NaN, inf and -inf in row
    0 and an all-zero last row. The output is poisoned with a byte the expected output does not hold; its guards
    and gaps, the input and the device scale must stay untouched."""
    from pyrms.ops.static_quant import static_quant
    from pyrms.ops.static_quant.twin import static_quant_twin
    from pyrms.tensor import Tensor

    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    x = allocate(rng, dt, rows, hidden, misalign=offsets.get("input", 0), stride=strides.get("input"))
    # magnitudes over many binades: from far below the scale's resolution to past qmax * scale
    v = rng.uniform(-1.0, 1.0, (rows, hidden)) * np.exp2(rng.uniform(-14.0, 3.0, (rows, hidden)))
    if specials:
        put_specials(rng, v)
    x.set_values(v.astype(dt.numpy))
    x.upload()
    if scale is None:
        scale = float(np.float32(rng.uniform(0.5, 1.5) * 4.0 / float(qt.qmax)))
    q = static_quant_twin(x.values(), scale, qt).view(np.uint8)
    # The output is poisoned with a byte the expected output does not hold; where it holds every byte (int8 over
    # its whole range), the launch runs twice, under two poisons: an element left unwritten shows one of them.
    unused = [b for b in (0xFF, 0x80, 0x55, 0xA5, 0x3C) if not np.any(q == b)]
    with closing(x):
        for poison in unused[:1] or [0x5A, 0xA5]:
            out = guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
            inputs, extra, scale_arg = {"input": x}, [], scale
            if device_scale or scale_array:
                sc = guarded(np.float32, 1, 1, offsets.get("scale", 0), None, np.float32(scale))
                extra.append(sc)
                inputs["scale"] = sc
                scale_arg = Tensor(sc.ptr, (1,), dtypes.FLOAT32) if scale_array else sc.ptr
            kwargs = dict(scale=scale_arg, out_dtype=qt, dtype=dt, input_stride=x.stride, out_stride=out.stride,
                          stream=stream, **pdl_option(pdl))
            label = case_label("static_quant", dt, rows, hidden, offsets, strides, out_dtype=qt.name, scale=scale,
                               device_scale=device_scale, scale_array=scale_array, specials=specials, pdl=pdl)
            with closing(out, *extra):
                run_checked(label, lambda: static_quant(out.ptr, x.ptr, rows, hidden, **kwargs),
                            outputs={"out": (out, q)}, inputs=inputs)


def _checker_call(case) -> tuple:
    opt = case.option
    return check_static_quant, dict(dtype=case.dtype, hidden=case.hidden, rows=case.rows, out_dtype=opt("out_dtype"),
                                    offsets=dict(case.offsets), strides=dict(case.strides),
                                    device_scale=opt("device_scale"), specials=opt("specials"), pdl=opt("pdl"))


# --- its cases of the case matrix


def _sanitize(dtype: str) -> Iterator[Case]:
    """A standalone quantizer: input and out at phases 0, 1 and VEC-1 (out's in bytes, 0..15 sampled), a
    device scale at a misaligned fp32, strided rows with NaN/inf, every output dtype."""
    op, n = "static_quant", dtypes.get(dtype).vec_elems
    for out_dtype in dtypes.QUANTIZED:
        kind = dict(out_dtype=out_dtype.name)
        for hidden in (9, 5125):
            for off in (0, 1, n - 1):
                for out_off in (0, 1, 7, 15):
                    yield case(op, dtype, 3, hidden, offsets={"input": off, "out": out_off}, **kind)
        yield case(op, dtype, 3, 769, offsets={"scale": 1}, device_scale=True, **kind)
        yield case(op, dtype, 5, 769, offsets={"input": 1, "out": 3}, strides={"input": 772, "out": 775},
                   specials=True, **kind)


TESTS = {"static_quant": OpTests(_checker_call, _sanitize)}

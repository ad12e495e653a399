"""gated_rms_norm's pieces of the shared checks (tests.support.op_tests): its checker on guarded operands, the call
that runs a case of the case matrix, and its sanitizer cases."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from pyrms import dtypes
from tests.support.case_matrix import Case, case, weight_kinds
from tests.support.op_tests import OpTests
from tests.support.testing import (allocate, case_common, case_label, closing, forced_row_variant, pdl_option, phases,
                                   put_specials, run_checked, weight_args, weight_operand)

# z's values: wide enough that the sigmoid saturates at both ends in some elements
Z_RANGE = (-12.0, 12.0)


def check_gated_rms_norm(rng, dtype, rows, hidden, *, group_size=None, norm_before_gate=True, weight="same",
                         offsets=None, strides=None, epsilon=1e-5, specials=False, variant=None, stream=None,
                         pdl=None):
    """One pyrms.gated_rms_norm launch on guarded operands, out compared bit for bit with gated_rms_norm_twin; its
    guards and gaps, x, z and the weight unchanged. offsets: 'x', 'z', 'out', 'weight' (elements past a 16-byte
    boundary); strides: 'x', 'z', 'out' (elements between rows). weight: "same", "float32" or "none". specials: NaN,
    inf and -inf in x's row 0 and z's last row, an all-zero last row of x, and z at +-100 (the exp's clamps).
    variant: the few-row or many-row kernel forced (None: as planned)."""
    from pyrms.ops.gated_rms_norm import gated_rms_norm
    from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_twin

    dt = dtypes.get(dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    x = allocate(rng, dt, rows, hidden, misalign=offsets.get("x", 0), stride=strides.get("x"))
    z = allocate(rng, dt, rows, hidden, misalign=offsets.get("z", 0), stride=strides.get("z"),
                 low=Z_RANGE[0], high=Z_RANGE[1])
    out = allocate(rng, dt, rows, hidden, misalign=offsets.get("out", 0), stride=strides.get("out"), poison=True)
    w = weight_operand(rng, dt, hidden, weight, offsets.get("weight", 0))
    if specials:
        xv, zv = x.values().astype(np.float64), z.values().astype(np.float64)
        put_specials(rng, xv)
        put_specials(rng, zv[::-1])
        zv[0, : min(4, hidden)] = (100.0, -100.0, 90.0, -90.0)[: min(4, hidden)]
        x.set_values(xv.astype(dt.numpy))
        z.set_values(zv.astype(dt.numpy))
        x.upload()
        z.upload()
    w_ptr, w_values, weight_dtype = weight_args(w, weight)
    want = gated_rms_norm_twin(x.values(), z.values(), w_values, epsilon, group_size=group_size,
                               norm_before_gate=norm_before_gate, row_phases=phases(x))
    label = case_label("gated_rms_norm", dt, rows, hidden, offsets, strides, group_size=group_size,
                       norm_before_gate=norm_before_gate, weight=weight, epsilon=epsilon, specials=specials,
                       variant=variant, pdl=pdl)
    inputs = {"x": x, "z": z} if w is None else {"x": x, "z": z, "weight": w}
    with closing(*(o for o in (x, z, out, w) if o is not None)), forced_row_variant(variant):
        run_checked(label, lambda: gated_rms_norm(
            x.ptr, z.ptr, w_ptr, epsilon, out=out.ptr, group_size=group_size, norm_before_gate=norm_before_gate,
            num_tokens=rows, hidden_size=hidden, dtype=dt, x_stride=x.stride, z_stride=z.stride,
            out_stride=out.stride, weight_dtype=weight_dtype, stream=stream, **pdl_option(pdl)),
            outputs={"out": (out, want)}, inputs=inputs)


def _checker_call(case) -> tuple:
    opt = case.option
    return check_gated_rms_norm, dict(case_common(case), rows=case.rows, offsets=dict(case.offsets),
                                      strides=dict(case.strides), group_size=opt("group_size"),
                                      norm_before_gate=opt("norm_before_gate"), weight=opt("weight"),
                                      specials=opt("specials"), variant=opt("variant"), pdl=opt("pdl"))


# --- its cases of the case matrix

# (hidden, group_size): one group (prefix-only, body-only, prefix + body + tail) and several (groups of whole
# vectors, of a vector and a tail, Mamba2's 8 groups of 1024 at its 8192, short groups that straddle vectors)
SHAPES = ((7, None), (64, None), (769, None), (5125, None), (256, 64), (264, 88), (8192, 1024), (60, 12))


def _sanitize(dtype: str) -> Iterator[Case]:
    """Both orders at every SHAPES entry with x at every phase, z and out at 1 and VEC-1 (the split's phase is x's;
    z's and out's decide only their load and store widths); the weight misaligned, fp32 and none;
    strided rows off the vector with specials; the few-row and many-row kernels at 1 to 300 rows."""
    op, n = "gated_rms_norm", dtypes.get(dtype).vec_elems
    for norm_before_gate in (True, False):
        for hidden, group_size in SHAPES:
            for name, offs in (("x", range(n)), ("z", (1, n - 1)), ("out", (1, n - 1))):
                for off in offs:
                    yield case(op, dtype, 3, hidden, offsets={name: off}, group_size=group_size,
                               norm_before_gate=norm_before_gate)
            yield case(op, dtype, 5, hidden, offsets={"weight": n - 1, "x": 1}, group_size=group_size,
                       norm_before_gate=norm_before_gate)
            for kind, off in weight_kinds(dtype):
                yield case(op, dtype, 5, hidden, offsets={"weight": off, "z": 1}, weight=kind, group_size=group_size,
                           norm_before_gate=norm_before_gate)
        yield case(op, dtype, 7, 769, offsets={"x": 1, "z": n - 1, "out": 2}, strides={"x": 800, "z": 771, "out": 1001},
                   norm_before_gate=norm_before_gate, specials=True)
        yield case(op, dtype, 7, 264, offsets={"x": 3}, strides={"x": 267, "z": 280, "out": 265}, group_size=88,
                   norm_before_gate=norm_before_gate, specials=True)
        for rows in (1, 6, 33, 300):
            for variant in ("few", "many"):
                yield case(op, dtype, rows, 1024, offsets={"x": 1}, group_size=256, norm_before_gate=norm_before_gate,
                           variant=variant, epsilon=1e-6)


TESTS = {"gated_rms_norm": OpTests(_checker_call, _sanitize)}

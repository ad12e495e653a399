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


def _x_and_z(rng, dt, rows, hidden, offsets: dict, strides: dict, specials: bool) -> tuple:
    """The guarded x and z of a gated check (z over Z_RANGE); specials: NaN, inf and -inf in x's row 0 and z's last
    row, an all-zero last row of x (and first of z), and z at +-100 and +-90 (the exp's clamps)."""
    x = allocate(rng, dt, rows, hidden, misalign=offsets.get("x", 0), stride=strides.get("x"))
    z = allocate(rng, dt, rows, hidden, misalign=offsets.get("z", 0), stride=strides.get("z"),
                 low=Z_RANGE[0], high=Z_RANGE[1])
    if specials:
        xv, zv = x.values().astype(np.float64), z.values().astype(np.float64)
        put_specials(rng, xv)
        put_specials(rng, zv[::-1])
        zv[0, : min(4, hidden)] = (100.0, -100.0, 90.0, -90.0)[: min(4, hidden)]
        x.set_values(xv.astype(dt.numpy))
        z.set_values(zv.astype(dt.numpy))
        x.upload()
        z.upload()
    return x, z


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
    x, z = _x_and_z(rng, dt, rows, hidden, offsets, strides, specials)
    out = allocate(rng, dt, rows, hidden, misalign=offsets.get("out", 0), stride=strides.get("out"), poison=True)
    w = weight_operand(rng, dt, hidden, weight, offsets.get("weight", 0))
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


def check_gated_backward(rng, dtype, rows, hidden, *, group_size=None, norm_before_gate=True, weight="same",
                         offsets=None, strides=None, epsilon=1e-5, specials=False, workspace=False, stream=None,
                         pdl=None):
    """One pyrms.gated_rms_norm_backward launch on guarded operands, each gradient compared bit for bit with
    gated_rms_norm_backward_twin; every guard, gap and input untouched. offsets: 'x', 'z',
    'grad_output', 'grad_x', 'grad_z', 'weight', 'grad_weight' (elements past a 16-byte boundary); strides: the
    rows' (elements between rows). workspace: pass a guarded one of the plan's bytes (its guards checked)."""
    from pyrms.ops.gated_rms_norm import gated_rms_norm_backward
    from pyrms.ops.gated_rms_norm.plan import plan_gated_rms_norm_backward
    from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_backward_twin

    dt = dtypes.get(dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    x, z = _x_and_z(rng, dt, rows, hidden, offsets, strides, specials)
    dy = allocate(rng, dt, rows, hidden, misalign=offsets.get("grad_output", 0), stride=strides.get("grad_output"),
                  low=-1.0, high=1.0)
    gx = allocate(rng, dt, rows, hidden, misalign=offsets.get("grad_x", 0), stride=strides.get("grad_x"), poison=True)
    gz = allocate(rng, dt, rows, hidden, misalign=offsets.get("grad_z", 0), stride=strides.get("grad_z"), poison=True)
    w = weight_operand(rng, dt, hidden, weight, offsets.get("weight", 0))
    gw = None if w is None else allocate(rng, dtypes.FLOAT32 if weight == "float32" else dt, 1, hidden,
                                         misalign=offsets.get("grad_weight", 0), poison=True)
    w_ptr, w_values, weight_dtype = weight_args(w, weight)
    dx, dz, dweight = gated_rms_norm_backward_twin(
        dy.values(), x.values(), z.values(), w_values, epsilon, group_size=group_size,
        norm_before_gate=norm_before_gate, row_phases=phases(x),
        weight_phase=w.index(0).start % dt.vec_elems if w is not None else 0)
    label = case_label("gated_rms_norm_backward", dt, rows, hidden, offsets, strides, group_size=group_size,
                       norm_before_gate=norm_before_gate, weight=weight, specials=specials, workspace=workspace)
    p = plan_gated_rms_norm_backward(
        dt, hidden, group_size or hidden, weight_dtype="none" if w is None else weight_dtype)
    nbytes = p.workspace_bytes(rows)
    ws = allocate(rng, dtypes.FLOAT32, 1, nbytes // 4 or 1) if workspace else None
    outputs = {"grad_x": (gx, dx), "grad_z": (gz, dz)}
    if gw is not None:
        outputs["grad_weight"] = (gw, dweight[None])
    inputs = {name: op for name, op in (("x", x), ("z", z), ("grad_output", dy), ("weight", w)) if op is not None}
    with closing(*(o for o in (x, z, dy, gx, gz, w, gw, ws) if o is not None)):
        run_checked(label, lambda: gated_rms_norm_backward(
            gx.ptr, gz.ptr, None if gw is None else gw.ptr, dy.ptr, x.ptr, z.ptr, w_ptr, epsilon,
            group_size=group_size, norm_before_gate=norm_before_gate, num_tokens=rows, hidden_size=hidden, dtype=dt,
            grad_x_stride=gx.stride, grad_z_stride=gz.stride, grad_output_stride=dy.stride, x_stride=x.stride,
            z_stride=z.stride, weight_dtype=weight_dtype, workspace=None if ws is None else ws.ptr, stream=stream,
            **pdl_option(pdl)),
            outputs=outputs, inputs=inputs, scratch={} if ws is None else {"workspace": ws})
    return dx, dz, dweight


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


def _backward_checker_call(case) -> tuple:
    opt = case.option
    return check_gated_backward, dict(case_common(case), rows=case.rows, offsets=dict(case.offsets),
                                      strides=dict(case.strides), group_size=opt("group_size"),
                                      norm_before_gate=opt("norm_before_gate"), weight=opt("weight"),
                                      specials=opt("specials"), pdl=opt("pdl"))


def _backward_sanitize(dtype: str) -> Iterator[Case]:
    """Both orders at every SHAPES entry with x at every phase, the other rows at 1 and VEC-1 (the statistics'
    split is x's, the row sums' the weight's; the others decide only their widths); the weight misaligned, fp32 and
    none; strided rows off the vector with specials; one row per block and a chunk per block."""
    op, n = "gated_rms_norm_backward", dtypes.get(dtype).vec_elems
    for norm_before_gate in (True, False):
        for hidden, group_size in SHAPES:
            for off in range(n):
                yield case(op, dtype, 3, hidden, offsets={"x": off}, group_size=group_size,
                           norm_before_gate=norm_before_gate)
            for name in ("z", "grad_output", "grad_x", "grad_z"):
                yield case(op, dtype, 3, hidden, offsets={name: n - 1}, group_size=group_size,
                           norm_before_gate=norm_before_gate)
            yield case(op, dtype, 5, hidden, offsets={"weight": n - 1, "grad_weight": 1, "x": 1}, group_size=group_size,
                       norm_before_gate=norm_before_gate)
            for kind, off in weight_kinds(dtype):
                weights = {"weight": off, "grad_weight": 1} if off else {}
                yield case(op, dtype, 5, hidden, offsets={**weights, "z": 1}, weight=kind, group_size=group_size,
                           norm_before_gate=norm_before_gate)
        yield case(op, dtype, 7, 769, offsets={"x": 1, "z": n - 1, "grad_x": 2},
                   strides={"x": 800, "z": 771, "grad_x": 1001, "grad_output": 790, "grad_z": 780},
                   norm_before_gate=norm_before_gate, specials=True)
        yield case(op, dtype, 7, 264, offsets={"x": 3}, strides={"x": 267, "z": 280, "grad_z": 265}, group_size=88,
                   norm_before_gate=norm_before_gate, specials=True)
        for rows in (1, 33, 600):  # 600 x 8 groups: a chunk per block
            yield case(op, dtype, rows, 1024, offsets={"x": 1}, group_size=128, norm_before_gate=norm_before_gate,
                       epsilon=1e-6)


TESTS = {"gated_rms_norm": OpTests(_checker_call, _sanitize),
         "gated_rms_norm_backward": OpTests(_backward_checker_call, _backward_sanitize)}

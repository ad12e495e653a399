"""The quantizing norms' pieces of the shared checks (tests.support.op_tests): their checker on guarded operands
and the call that runs a case of the case matrix."""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

from pyrms import dtypes
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops.rms_norm_quant import plan as quant_plan
from pyrms.ops.rms_norm_quant import twin as quant_twin
from tests.support.case_matrix import MISALIGNED_HIDDENS, ROW_VARIANTS, Case, case, operands
from tests.support.op_tests import OpTests
from tests.support.testing import (allocate, allocate_named, case_common, case_label, closing, forced_row_variant,
                                   guarded, pdl_option, phases, put_specials, run_checked)


def check_rms_norm_quant(rng, dtype, rows, hidden, out_dtype, *, mode="static", fused=False, offsets=None,
                         strides=None, device_scale=False, scale_ub=None, round_input=False, specials=False,
                         epsilon=1e-5, variant=None, pdl=None, group_size=None, ue8m0=False, column_major=False,
                         norm_out=False, sum_precision=None, stream=None):
    """One pyrms.rms_norm_quant (fused: fused_add_rms_norm_quant) launch on guarded operands, every output
    compared bit for bit with the twin: q, the per-token or per-group scales, the updated residual, and with
    norm_out the unquantized output (rms_norm_twin's, of the rounded sum when fused; of the fp32 sum,
    fused_add_rms_norm_twin's, with sum_precision="fp32").

    offsets: elements past a 16-byte boundary by name ('input', 'residual', 'weight', 'out' in bytes,
    'scale': fp32 elements, for the per-token or per-group scales or a device scale, 'scale_ub', 'norm_out');
    strides: 'input', 'residual', 'out', 'norm_out', 'scale' (per group: scale_stride, the row stride of row-major scales or the
    group stride of column-major ones; the padding must stay poisoned). device_scale: the static scale read
    from a device pointer. scale_ub: None, a float, or "device" (a device pointer to a drawn value).
    group_size, ue8m0, column_major: per_group's. specials: NaN, inf and -inf in row 0, zeros in the last
    row. The quantized output is poisoned with a byte the expected output does not hold.
    """
    from pyrms.ops.rms_norm_quant import fused_add_rms_norm_quant, rms_norm_quant

    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    offsets, strides = dict(offsets or {}), dict(strides or {})
    names = ("input", "residual") if fused else ("input",)
    ops = allocate_named(rng, dt, rows, hidden, names, {n: offsets.get(n, 0) for n in names},
                         {n: strides[n] for n in names if n in strides})
    w = allocate(rng, dt, 1, hidden, misalign=offsets.get("weight", 0), low=-1.0, high=1.0)
    if specials:
        values = ops["input"].values().astype(np.float32)
        put_specials(rng, values)
        ops["input"].set_values(values.astype(dt.numpy))
        ops["input"].upload()
    scale = float(np.float32(rng.uniform(0.5, 1.5) * 2.5 / float(qt.qmax)))
    ub = None if scale_ub is None else float(np.float32(rng.uniform(1.0, 3.0) if scale_ub == "device" else scale_ub))
    p = quant_plan.plan_rms_norm_quant(dt, hidden, qt, mode=mode, round_input=round_input, residual=fused, group=group_size,
                                       sum_precision=sum_precision)
    twin = dict(block=p.block, mode=mode, scale=scale, scale_ub=ub, round_input=round_input)
    grouping = {}
    if mode == "per_group":
        twin.update(group=p.group_size, ue8m0=ue8m0)
        grouping = dict(group_size=group_size, ue8m0=ue8m0, column_major_scales=column_major,
                        scale_stride=strides.get("scale"))
    x, res = ops["input"], ops.get("residual")
    if fused:
        q, scales, total = quant_twin.fused_add_rms_norm_quant_twin(x.values(), res.values(), w.values()[0], epsilon,
                                                                   qt, residual_phases=phases(res),
                                                                   input_phases=phases(x),
                                                                   sum_precision=p.sum_precision, **twin)
    else:
        q, scales = quant_twin.rms_norm_quant_twin(x.values(), w.values()[0], epsilon, qt, row_phases=phases(x), **twin)
    q = q.view(np.uint8)
    poison = next((b for b in (0xFF, 0x80, 0x55) if not np.any(q == b)), 0xFF)
    out = guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
    extra, outputs = [], {"out": (out, q)}
    if mode == "per_token":
        sc = guarded(np.float32, 1, rows, offsets.get("scale", 0), None, np.nan)
        outputs["scales"] = (sc, scales[None])
        extra.append(sc)
        scale_arg = sc.ptr
    elif mode == "per_group":
        laid = scales.T if column_major else scales  # the scales as they lie in memory: (groups, rows) column-major
        sc = guarded(np.float32, *laid.shape, offsets.get("scale", 0), strides.get("scale"), np.nan)
        outputs["scales"] = (sc, laid)
        extra.append(sc)
        scale_arg = sc.ptr
    elif device_scale:
        sc = guarded(np.float32, 1, 1, offsets.get("scale", 0), None, scale)
        extra.append(sc)
        scale_arg = sc.ptr
    else:
        sc, scale_arg = None, scale
    ub_arg, inputs = ub, {"weight": w}
    if scale_ub == "device":
        ub_op = guarded(np.float32, 1, 1, offsets.get("scale_ub", 0), None, ub)
        extra.append(ub_op)
        inputs["scale_ub"], ub_arg = ub_op, ub_op.ptr
    if mode == "static" and device_scale:
        inputs["scale"] = sc
    if fused:
        outputs["residual"] = (res, total)
    common = {}  # the op's keyword arguments
    if norm_out:
        # rms_norm's output bit for bit: its default rounding is what round_input quantizes
        norm = allocate(rng, dt, rows, hidden, misalign=offsets.get("norm_out", 0), stride=strides.get("norm_out"),
                        poison=True)
        if fused and p.sum_precision == "fp32":
            expected = fused_twin.fused_add_rms_norm_twin(x.values(), res.values(), w.values()[0], epsilon, block=p.block,
                                                          input_phases=phases(x), sum_precision="fp32",
                                                          round_once=not round_input)[0]
        else:
            expected = rms_twin.rms_norm_twin(total if fused else x.values(), w.values()[0], epsilon, block=p.block,
                                              row_phases=phases(res if fused else x), round_once=not round_input)
        outputs["norm_out"] = (norm, expected)
        extra.append(norm)
        common["norm_out"], common["norm_out_stride"] = norm.ptr, norm.stride
    inputs["input"] = x
    common.update(scale=scale_arg, out_dtype=qt, mode=mode, scale_ub=ub_arg, dtype=dt, input_stride=x.stride,
                  out_stride=out.stride, round_input=round_input, stream=stream, **grouping, **pdl_option(pdl))
    if fused:
        launch = lambda: fused_add_rms_norm_quant(out.ptr, x.ptr, res.ptr, w.ptr, epsilon, rows, hidden,  # noqa: E731
                                                  residual_stride=res.stride, sum_precision=sum_precision, **common)
    else:
        launch = lambda: rms_norm_quant(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, **common)  # noqa: E731
    with closing(*ops.values(), w, out, *extra):
        with forced_row_variant(variant):
            run_checked(case_label("fused_add_rms_norm_quant" if fused else "rms_norm_quant", dt, rows, hidden, offsets,
                                   strides, out_dtype=qt.name, mode=mode, device_scale=device_scale, scale_ub=scale_ub,
                                   round_input=round_input, specials=specials, variant=variant, pdl=pdl,
                                   norm_out=norm_out, sum_precision=sum_precision,
                                   **{k: v for k, v in grouping.items() if k != "scale_stride"}),
                        launch, outputs=outputs, inputs=inputs)


def _checker_call(case, *, fused: bool) -> tuple:
    opt = case.option
    return check_rms_norm_quant, dict(
        case_common(case), rows=case.rows, pdl=opt("pdl"), out_dtype=opt("out_dtype"), mode=opt("mode"), fused=fused,
        offsets=dict(case.offsets), strides=dict(case.strides), device_scale=opt("device_scale"),
        scale_ub=opt("scale_ub"), round_input=opt("round_input"), specials=opt("specials"), variant=opt("variant"),
        group_size=opt("group_size"), ue8m0=opt("ue8m0"), column_major=opt("column_major"), norm_out=opt("norm_out"),
        sum_precision=opt("sum_precision"))


# --- their cases of the case matrix


def _sanitize(op: str, dtype: str) -> Iterator[Case]:
    """Every output dtype and mode: input, weight, residual and the output each at offsets 1 and VEC-1 (the
    rows' vector) at hidden sizes with a prefix, a body and a tail (the static scale read from a device
    pointer); then a misaligned per-token scale, strided rows, NaN/inf rows and both row variants."""
    n = dtypes.get(dtype).vec_elems
    for out_dtype in dtypes.QUANTIZED:
        for mode in ("static", "per_token"):
            kind = dict(out_dtype=out_dtype.name, mode=mode)
            for hidden in MISALIGNED_HIDDENS:
                for name in operands(op)[0] + ("weight",):
                    for off in (1, n - 1):
                        yield case(op, dtype, 3, hidden, offsets={name: off}, device_scale=mode == "static", **kind)
            for variant in ROW_VARIANTS:
                yield case(op, dtype, 5, 16384, offsets={"scale": 1}, strides={"input": 16387, "out": 16390},
                           specials=True, variant=variant, **kind)
        yield from _sanitize_group_quant(op, dtype, n, out_dtype.name)
    yield from _sanitize_norm_out(op, dtype, n)
    if op == "fused_add_rms_norm_quant" and dtype != "float32":
        yield from _sanitize_fp32_sum(op, dtype, n)


def _sanitize_fp32_sum(op: str, dtype: str, n: int) -> Iterator[Case]:
    """The fused add's fp32 sum beside each mode: input, residual and the outputs at phases 1 and VEC-1 (the
    sums rebuilt from both rows at the outputs' splits, the residual stored last), strided rows with NaN/inf, the
    unquantized output beside, both row variants."""
    for mode, group, hidden in (("static", None, 5125), ("per_token", None, 769), ("per_group", 64, 192)):
        kind = dict(mode=mode, group_size=group, sum_precision="fp32")
        for name in ("input", "residual", "out", "norm_out"):
            for off in (1, n - 1):
                yield case(op, dtype, 3, hidden, offsets={name: off}, norm_out=name == "norm_out", **kind)
        for variant in ROW_VARIANTS:
            yield case(op, dtype, 5, hidden, offsets={"input": 1, "residual": n - 1},
                       strides={"input": hidden + 3, "residual": hidden + 5}, specials=True, norm_out=True,
                       variant=variant, out_dtype="int8", **kind)


def _sanitize_norm_out(op: str, dtype: str, n: int) -> Iterator[Case]:
    """The unquantized output beside each mode: at phases 1 and VEC-1 (its own split against x's), at x's
    phase (the held vectors' y), strided, with NaN/inf rows, both row variants."""
    for mode, group, hidden in (("static", None, 5125), ("per_token", None, 769), ("per_group", 64, 192)):
        kind = dict(mode=mode, group_size=group, norm_out=True)
        for off in (1, n - 1):
            yield case(op, dtype, 3, hidden, offsets={"norm_out": off}, **kind)
            yield case(op, dtype, 3, hidden, offsets={"norm_out": off, "input": off}, device_scale=mode == "static",
                       **kind)
        for variant in ROW_VARIANTS:
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
        for variant in ROW_VARIANTS:
            for column_major in (False, True):
                yield case(op, dtype, 5, hidden, offsets={"scale": 1, "input": 1},
                           strides={"input": hidden + 3, "out": hidden + 5,
                                    "scale": 8 if column_major else hidden // group + 1},
                           column_major=column_major, ue8m0=column_major, specials=True, variant=variant,
                           group_size=group, **kind)
    yield case(op, dtype, 3, 65536, offsets={"input": 1}, group_size=64, **kind)


TESTS = {"rms_norm_quant": OpTests(functools.partial(_checker_call, fused=False),
                                   functools.partial(_sanitize, "rms_norm_quant")),
         "fused_add_rms_norm_quant": OpTests(functools.partial(_checker_call, fused=True),
                                             functools.partial(_sanitize, "fused_add_rms_norm_quant"))}

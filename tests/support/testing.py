"""Guarded, poisoned device operands at chosen alignments and strides, for proving kernels correct.

Each operand lives inside its own allocation: GUARD elements before and after, and between
strided rows, all filled with a known pattern. Outputs are poisoned with 0xFF bytes (a NaN in
every dtype, and a bit pattern no kernel result has), so that an unwritten element and a write
outside the rows both show up in a bytewise comparison of the whole allocation.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from pyrms import driver, dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops import registry
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops.rms_norm_quant import plan as quant_plan
from pyrms.ops.rms_norm_quant import twin as quant_twin
from pyrms.ops._row_twin import row_stats_twin

GUARD = 64  # elements on each side: more than one 16-byte vector in every dtype


def bits(a: np.ndarray) -> np.ndarray:
    """Raw bits, so that NaN compares equal to itself and -0 differs from +0."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@dataclass
class Rows:
    """A [rows, hidden] operand at an element offset and row stride inside a guarded allocation; or, with
    ``lead`` (sizes, strides), an N-D view [*sizes, hidden] whose rows, in row-major order of the sizes,
    are those element strides apart along each leading dimension (``stride`` then unused)."""

    buffer: driver.DeviceBuffer
    host: np.ndarray  # the whole allocation's intended contents
    offset: int  # elements from the allocation's start to row 0
    rows: int
    hidden: int
    stride: int
    lead: tuple | None = None

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.offset * self.host.dtype.itemsize

    def index(self, r: int) -> slice:
        if self.lead is None:
            start = self.offset + r * self.stride
        else:
            sizes, strides = self.lead
            start = self.offset + sum(int(i) * s for i, s in zip(np.unravel_index(r, sizes), strides))
        return slice(start, start + self.hidden)

    def values(self) -> np.ndarray:
        """The [rows, hidden] values as the host mirror holds them."""
        return np.stack([self.host[self.index(r)] for r in range(self.rows)])

    def device_values(self) -> np.ndarray:
        """The [rows, hidden] values as the device holds them now."""
        whole = self.download()
        return np.stack([whole[self.index(r)] for r in range(self.rows)])

    def set_values(self, values: np.ndarray) -> None:
        for r in range(self.rows):
            self.host[self.index(r)] = values[r]

    def upload(self, stream=None) -> None:
        driver.memcpy_htod(self.buffer.ptr, self.host, stream)

    def download(self) -> np.ndarray:
        whole = np.empty_like(self.host)
        driver.memcpy_dtoh(whole, self.buffer.ptr)
        return whole

    def close(self) -> None:
        self.buffer.close()


def allocate(rng, dtype, rows: int, hidden: int, *, misalign: int = 0, stride: int | None = None,
             poison: bool = False, low: float = -2.0, high: float = 2.0, lead: tuple | None = None) -> Rows:
    """A guarded operand: random values (or 0xFF poison), `misalign` elements past a 16-byte boundary.

    cuMemAlloc returns 256-byte aligned memory and GUARD elements are a multiple of 16 bytes,
    so row 0 sits exactly `misalign` elements past a 16-byte boundary. ``lead``: (sizes, strides) of an
    N-D view (Rows), which then gives the rows (strides >= 0, in elements).
    """
    dt = dtypes.get(dtype)
    stride = hidden if stride is None else stride
    if lead is not None:
        sizes, strides = lead
        rows = int(np.prod(sizes))
        span = sum((n - 1) * st for n, st in zip(sizes, strides)) + hidden
    else:
        span = (rows - 1) * stride + hidden
    total = GUARD + misalign + span + GUARD
    if poison:
        host = np.full(total * dt.itemsize, 0xFF, dtype=np.uint8).view(dt.numpy)
    else:
        host = rng.uniform(low, high, total).astype(dt.numpy)
    operand = Rows(driver.DeviceBuffer(total * dt.itemsize), host, GUARD + misalign, rows, hidden, stride, lead)
    operand.upload()
    return operand


def phases(operand: Rows) -> np.ndarray:
    """Each row's position inside its 16-byte vector, in elements (what the twin needs)."""
    n = 16 // operand.host.dtype.itemsize
    return np.array([operand.index(r).start % n for r in range(operand.rows)])


def expected_whole(operand: Rows, rows_values: np.ndarray | None = None) -> np.ndarray:
    """The whole allocation as it must be after a launch: as uploaded, with `rows_values` in its rows."""
    whole = operand.host.copy()
    if rows_values is not None:
        for r in range(operand.rows):
            whole[operand.index(r)] = rows_values[r]
    return whole


def _compare(label: str, name: str, operand: Rows, want: np.ndarray, *, guards_only: bool = False) -> None:
    got = operand.download()
    differs = bits(got) != bits(want)
    if guards_only:  # scratch memory: only what lies outside its rows must be untouched
        differs[operand.offset:operand.index(operand.rows - 1).stop] = False
    mismatch = np.flatnonzero(differs)
    if mismatch.size:
        raise AssertionError(
            f"{label}: {name}: {mismatch.size} elements differ, first at allocation index {mismatch[:5]} "
            f"(rows start at {operand.offset}, stride {operand.stride}): got {got[mismatch[:5]]}, "
            f"want {want[mismatch[:5]]} (bits {_hex(got, mismatch[:5])} against {_hex(want, mismatch[:5])})")


def _hex(a: np.ndarray, where: np.ndarray) -> str:
    """The raw bits at where, in hex: two NaNs or two zeros that print alike may differ there."""
    return "[" + " ".join(f"{int(b):0{2 * a.itemsize}x}" for b in bits(a)[where]) + "]"


def run_checked(label: str, launch, outputs: dict, inputs: dict, scratch: dict | None = None) -> None:
    """Run ``launch()``, wait for the device, then compare whole allocations bit for bit.

    outputs: name -> (Rows, expected [rows, hidden] values): the rows must hold them, the guards
    and gaps what was there; inputs: name -> Rows, entirely unchanged; scratch: name -> Rows whose
    rows the launch may use freely but whose guards must stay untouched. AssertionError names the
    first operand that differs.
    """
    wants = {name: expected_whole(op, values) for name, (op, values) in outputs.items()}
    wants.update((name, expected_whole(op)) for name, op in inputs.items())
    launch()
    driver.synchronize()
    for name, (op, _) in outputs.items():
        _compare(label, name, op, wants[name])
    for name, op in inputs.items():
        _compare(label, name, op, wants[name])
    for name, op in (scratch or {}).items():
        _compare(label, name, op, op.host, guards_only=True)


@contextlib.contextmanager
def _closing(*operands: Rows):
    try:
        yield
    finally:
        for operand in {id(o): o for o in operands}.values():
            operand.close()


def _pdl(pdl) -> dict:
    """The op's pdl keyword: given, or left to the op's default (None)."""
    return {} if pdl is None else {"pdl": pdl}


# The modules of the ops whose launches choose between the row core's few-row and many-row kernels (_FEW_ROWS).
_ROW_OPS = tuple(dict.fromkeys(spec.module for spec in registry.REGISTRY.values() if spec.check in ("row", "quant")))


@contextlib.contextmanager
def forced_row_variant(variant: str | None):
    """Within the block, pyrms.rms_norm, fused_add_rms_norm, layer_norm and the quantizing ops launch their kernel for
    "few" or for "many" rows whatever the row count (None: as planned); the thresholds are restored on
    the way out, exception or not."""
    import importlib

    if variant not in (None, "few", "many"):
        raise ValueError(f"variant must be None, 'few' or 'many', got {variant!r}")
    # By module name: the package re-exports each function under its module's name.
    modules = [importlib.import_module(name) for name in _ROW_OPS]
    saved = [m._FEW_ROWS for m in modules]
    if variant is not None:
        for m in modules:
            m._FEW_ROWS = {"few": 2**31, "many": 0}[variant]
    try:
        yield
    finally:
        for m, value in zip(modules, saved):
            m._FEW_ROWS = value


def _weight(rng, dt, hidden, kind: str, offset: int, rows: int = 1, stride: int | None = None):
    """The guarded weight of a row op's check: of the dtype ("same"), float32, or none (None); `rows`
    rows `stride` apart for a weight per outer row."""
    if kind not in plan.WEIGHT_KINDS:
        raise ValueError(f"weight must be one of {plan.WEIGHT_KINDS}, got {kind!r}")
    if kind == "none":
        return None
    return allocate(rng, dtypes.FLOAT32 if kind == "float32" else dt, rows, hidden, misalign=offset, stride=stride,
                    low=-1.0, high=1.0)


def _weight_args(w, kind: str):
    """(pointer, twin values, the op's weight_dtype) of a check's weight."""
    if w is None:
        return None, None, None
    return w.ptr, w.values()[0], ("float32" if kind == "float32" else None)


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
    w = _weight(rng, dt, hidden, weight, w_off)
    out = x if in_place else allocate(rng, odt, rows, hidden, misalign=out_off, stride=out_stride, poison=True)
    w_ptr, w_values, w_dtype = _weight_args(w, weight)
    rstd = None if rstd_off is None else _guarded(np.float32, 1, rows, rstd_off, None, np.nan)
    with _closing(x, out, *([w] if w else []), *([rstd] if rstd else [])):
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
                                         **_pdl(pdl)),
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
    w = _weight(rng, dt, hidden, weight, w_off, sizes[0] if per_row else 1, (w_stride or hidden) if per_row else None)
    with _closing(x, out, *([w] if w else [])):
        p = rms_plan.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        w_values = None
        if w is not None:
            w_values = np.repeat(w.values(), x.rows // sizes[0], axis=0) if per_row else w.values()[0]
        want = rms_twin.rms_norm_twin(x.values(), w_values, epsilon, block=p.block, row_phases=phases(x),
                                       gemma=gemma, round_once=round_once, out_dtype=out_dtype)
        options = dict(gemma=gemma, round_once=round_once, stream=stream, **_pdl(pdl))
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


# --- the rest of the family: operands named as the ops name their arguments ------------------------

_RANGES = {"weight": (-1.0, 1.0), "bias": (-1.0, 1.0), "grad_output": (-1.0, 1.0)}


def _allocate(rng, dt, rows, hidden, names, offsets, strides, *, vectors=(), outputs=(), out_dtype=None,
              dtypes_of=None):
    """Guarded operands by name: [rows, hidden] ones, then [hidden] ones (`vectors`); `outputs` are
    poisoned and, if vectors, in `out_dtype`; `dtypes_of`: name -> dtype for operands of another dtype
    than `dt` (mixed dtypes). offsets/strides: name -> elements (default 0 / hidden)."""
    offsets, strides = offsets or {}, strides or {}
    unknown = (set(offsets) | set(strides)) - set(names) - set(vectors)
    if unknown:
        raise ValueError(f"unknown operands {sorted(unknown)}; these are {[*names, *vectors]}")
    made = {}
    for name in (*names, *vectors):
        is_vector = name in vectors
        low, high = _RANGES.get(name, (-2.0, 2.0))
        own = (dtypes_of or {}).get(name) or (out_dtype if is_vector and name in outputs and out_dtype else dt)
        made[name] = allocate(rng, own,
                              1 if is_vector else rows, hidden, misalign=offsets.get(name, 0),
                              stride=None if is_vector else strides.get(name), poison=name in outputs,
                              low=low, high=high)
    return made


def _label(op: str, dt, rows, hidden, offsets, strides, **options) -> str:
    extra = " ".join(f"{k}={v}" for k, v in options.items() if v not in (None, False))
    return f"{op} {dt.name} rows={rows} hidden={hidden} offsets={offsets or {}} strides={strides or {}} {extra}"


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
    x = _allocate(rng, dt, rows, hidden, ("input",), offsets, strides)["input"]
    res = allocate(rng, p.residual_dtype, rows, hidden, misalign=r_off, stride=r_stride)
    w = _weight(rng, dt, hidden, weight, w_off)
    o = allocate(rng, out_dtype, rows, hidden, misalign=o_off, stride=o_stride, poison=True) if mixed else None
    w_ptr, w_values, w_dtype = _weight_args(w, weight)
    with _closing(x, res, *([w] if w else []), *([o] if o else [])):
        out, total = fused_twin.fused_add_rms_norm_twin(x.values(), res.values(), w_values, epsilon, block=p.block,
                                                       residual_phases=phases(res), input_phases=phases(x),
                                                       gemma=gemma, round_once=round_once,
                                                       sum_precision=p.sum_precision,
                                                       out_dtype=out_dtype if mixed else None)
        with forced_row_variant(variant):
            run_checked(_label("fused_add_rms_norm", dt, rows, hidden,
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
                                                   **_pdl(pdl)),
                        outputs={"out" if o else "input": (o or x, out), "residual": (res, total)},
                        inputs={**({"weight": w} if w else {}), **({"input": x} if o else {})})


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
    ops = _allocate(rng, dt, rows, hidden, names, offsets, strides, vectors=vectors, outputs=("out",),
                    dtypes_of={"out": odt, "weight": pdt, "bias": pdt})
    x, w, b = ops["input"], ops.get("weight"), ops.get("bias")
    out = x if in_place else ops["out"]
    stat_names = () if stats_off is None else ("rstd",) if rms else ("mean", "rstd")
    stats = {name: _guarded(np.float32, 1, rows, stats_off, None, np.nan) for name in stat_names}
    with _closing(*ops.values(), *stats.values()):
        p = ln_plan.plan_layer_norm(dt, hidden, bias=bias, weight=weight != "none", rms=rms)
        want = ln_twin.layer_norm_twin(x.values(), w.values()[0] if w else None, b.values()[0] if b else None,
                                         epsilon, block=p.block, row_phases=phases(x), out_dtype=out_dtype, rms=rms)
        twin_stats = {}
        if stats:  # the forward's statistics: the row core's tree at the forward's fold
            twin_stats = dict(zip(("mean", "rstd"), row_stats_twin(x.values().astype(np.float32), epsilon, p.block,
                                                                   phases(x), dt.vec_elems, centered=not rms)))
        with forced_row_variant(variant):
            run_checked(_label("layer_norm", dt, rows, hidden, offsets, strides, in_place=in_place, no_bias=not bias,
                               weight=weight, variant=variant, pdl=pdl, out_dtype=out_dtype, rms=rms),
                        lambda: layer_norm(out.ptr, x.ptr, w.ptr if w else None, b.ptr if b else None, epsilon, rows,
                                           hidden, dtype=dt, input_stride=x.stride, out_stride=out.stride,
                                           stream=stream, weight_dtype="float32" if weight == "float32" else None,
                                           out_dtype=out_dtype, rms=rms, **{k: v.ptr for k, v in stats.items()},
                                           **_pdl(pdl)),
                        outputs={"out": (out, want), **{k: (v, twin_stats[k][None]) for k, v in stats.items()}},
                        inputs={name: ops[name] for name in (*vectors, *(() if in_place else ("input",)))})


def check_norm_backward(rng, dtype, rows, hidden, *, layer_norm=False, offsets=None, strides=None, in_place=None,
                        gemma=False, grad_dtype=None, rows_per_block=None, own_workspace=False, grad_bias=True,
                        epsilon=1e-5, stream=None, pdl=None, weight="same",
                        grad_output_kind="same", rstd=None, bias=False) -> dict[str, np.ndarray]:
    """One pyrms.rms_norm_backward (or layer_norm_backward) launch on guarded operands ('grad_output',
    'input', 'weight', 'grad_input', 'grad_weight', 'grad_bias'), every output compared bit for bit with
    the twin. in_place: 'grad_output' or 'input', the operand grad_input overwrites. own_workspace:
    pass a guarded workspace (its guards are checked) instead of the pooled one. grad_bias=False: a
    LayerNorm without bias (grad_bias=None). weight: "same" (random, of the dtype), "ones" (the dtype's,
    every element 1), "float32" (an fp32 weight beside bf16/fp16 rows: fp32 parameter gradients) or
    "none" (weight=None, grad_weight=None: dx and LayerNorm's grad_bias only). grad_output_kind: "same",
    or "float32" (an fp32 grad_output, beside an fp32 weight). rstd: None (recomputed), "forward"
    (a guarded float32 per row holding the forward's inv, the row core twin's, and for LayerNorm a guarded mean
    beside it: the same bits as recomputing) or "random" (any positive rstd, and LayerNorm's any mean, used as
    given). bias (RMSNorm): the backward of an RMSNorm with
    a bias, grad_bias written too.
    Returns the outputs as computed, by name (grad_input as [rows, hidden]), for comparisons between
    launches."""
    from pyrms.ops.layer_norm import layer_norm_backward
    from pyrms.ops.rms_norm_backward import rms_norm_backward

    if weight not in ("same", "ones", "float32", "none"):
        raise ValueError(f"weight must be 'same', 'ones', 'float32' or 'none' for the backward, got {weight!r}")
    dt = dtypes.get(dtype)
    weighted = weight != "none"
    own_dtypes = {name: "float32" for name, kind in (("weight", weight), ("grad_output", grad_output_kind))
                  if kind == "float32"}
    if bias and layer_norm:
        raise ValueError("bias is RMSNorm's (a LayerNorm's bias gradient is grad_bias)")
    p = bwd_plan.plan_norm_backward(dt, hidden, centered=layer_norm, gemma=gemma, grad_dtype=grad_dtype, weight=weighted,
                                    grad_bias=grad_bias if layer_norm else bias, weight_dtype=own_dtypes.get("weight"),
                                    grad_output_dtype=own_dtypes.get("grad_output"))
    # The twin's parameter gradients, in its order, and those this launch writes.
    sums = ("grad_weight",) * weighted + ("grad_bias",) * (layer_norm or bias)
    params = tuple(name for name in sums if name != "grad_bias" or grad_bias)
    names = ("grad_output", "input") if in_place else ("grad_output", "input", "grad_input")
    rows_offsets = {k: v for k, v in (offsets or {}).items() if k not in ("mean", "rstd")} or None  # theirs: below
    ops = _allocate(rng, dt, rows, hidden, names, rows_offsets, strides, vectors=("weight",) * weighted + params,
                    outputs=("grad_input", *params), out_dtype=p.grad_dtype, dtypes_of=own_dtypes)
    dy, x, w = ops["grad_output"], ops["input"], ops.get("weight")
    if weight == "ones":
        w.set_values(np.ones((1, hidden), dtype=dt.numpy))
        w.upload()
    dx = ops[in_place] if in_place else ops["grad_input"]
    ws = allocate(rng, "float32", 1, p.workspace_bytes(rows, rows_per_block) // 4, poison=True) if own_workspace else None
    saved_names = ("mean", "rstd") if layer_norm else ("rstd",)
    if rstd is not None:
        if rstd not in ("forward", "random"):
            raise ValueError(f"rstd must be None, 'forward' or 'random'; got {rstd!r}")
        values = dict(zip(("mean", "rstd"), row_stats_twin(x.values().astype(np.float32), epsilon, p.stats_fold,
                                                           phases(x), dt.vec_elems, centered=layer_norm)
                          if rstd == "forward" else (rng.uniform(-1.0, 1.0, rows).astype(np.float32),
                                                     rng.uniform(0.1, 3.0, rows).astype(np.float32))))
        for name in saved_names:
            saved = _guarded(np.float32, 1, rows, (offsets or {}).get(name, 0), None, np.nan)
            saved.set_values(values[name][None])
            saved.upload()
            ops[name] = saved
    with _closing(*ops.values(), *([ws] if ws else [])):
        want = bwd_twin.norm_backward_twin(dy.values(), x.values(), w.values()[0] if w else None, epsilon,
                                            block=p.block, fold=p.stats_fold, x_phases=phases(x),
                                            # in the column split's vectors of the rows' vec_elems columns
                                            weight_phase=w.index(0).start % dt.vec_elems if w else 0,
                                            chunk_rows=p.chunk_rows,
                                            centered=layer_norm, gemma=gemma, grad_dtype=p.grad_dtype,
                                            rstd=ops["rstd"].values()[0] if rstd else None, grad_bias=bias,
                                            mean=ops["mean"].values()[0] if rstd and layer_norm else None)
        wanted = dict(zip(sums, want[1:]))
        grads = {"grad_weight": None, "grad_bias": None, **{name: ops[name].ptr for name in params}}
        common = dict(dtype=dt, grad_output_stride=dy.stride, input_stride=x.stride, grad_input_stride=dx.stride,
                      grad_weight_dtype=p.grad_dtype if params else None, workspace=ws.ptr if ws else None,
                      rows_per_block=rows_per_block, stream=stream, weight_dtype=own_dtypes.get("weight"),
                      grad_output_dtype=own_dtypes.get("grad_output"), **_pdl(pdl))
        w_ptr = w.ptr if w else None
        if layer_norm:
            launch = lambda: layer_norm_backward(dx.ptr, grads["grad_weight"], grads["grad_bias"], dy.ptr, x.ptr, w_ptr,
                                                 epsilon, rows, hidden, mean=ops["mean"].ptr if rstd else None,
                                                 rstd=ops["rstd"].ptr if rstd else None, **common)  # noqa: E731
        else:
            launch = lambda: rms_norm_backward(dx.ptr, grads["grad_weight"], dy.ptr, x.ptr, w_ptr, epsilon, rows,
                                               hidden, gemma=gemma, rstd=ops["rstd"].ptr if rstd else None,
                                               grad_bias=grads["grad_bias"], **common)  # noqa: E731
        inputs = {name: ops[name] for name in ("grad_output", "input", "weight", *saved_names)
                  if name in ops and name != in_place}
        run_checked(_label("layer_norm_backward" if layer_norm else "rms_norm_backward", dt, rows, hidden, offsets,
                           strides, in_place=in_place, gemma=gemma, grad_dtype=grad_dtype,
                           rows_per_block=rows_per_block, own_workspace=own_workspace,
                           no_grad_bias=layer_norm and not grad_bias, pdl=pdl,
                           weight=None if weight == "same" else weight,
                           grad_output=None if grad_output_kind == "same" else grad_output_kind, rstd=rstd, bias=bias),
                    launch, outputs={"grad_input": (dx, want[0]), **{name: (ops[name], wanted[name][None]) for name in params}},
                    inputs=inputs, scratch={"workspace": ws} if ws else None)
        return {"grad_input": dx.device_values(), **{name: ops[name].download()[ops[name].index(0)] for name in params}}


# --- quantized outputs -----------------------------------------------------------------------------


def _raw(host: np.ndarray, offset: int, rows: int, hidden: int, stride: int) -> Rows:
    """A guarded operand of any numpy dtype (a quantized output's bytes, fp32 scales) holding `host`."""
    operand = Rows(driver.DeviceBuffer(host.nbytes), host, offset, rows, hidden, stride)
    operand.upload()
    return operand


def _guarded(dtype: np.dtype, rows: int, hidden: int, misalign: int, stride: int | None, fill) -> Rows:
    stride = hidden if stride is None else stride
    total = GUARD + misalign + (rows - 1) * stride + hidden + GUARD
    return _raw(np.full(total, fill, dtype=dtype), GUARD + misalign, rows, hidden, stride)


def _specials(rng, values: np.ndarray) -> None:
    """NaN, +inf and -inf in row 0 and an all-zero last row (per-token's minimum scale), in place."""
    cols = rng.choice(values.shape[1], size=min(3, values.shape[1]), replace=False)
    for col, special in zip(cols, (np.nan, np.inf, -np.inf)):
        values[0, col] = special
    if values.shape[0] > 1:
        values[-1] = 0


def check_rms_norm_quant(rng, dtype, rows, hidden, out_dtype, *, mode="static", fused=False, offsets=None,
                         strides=None, device_scale=False, scale_ub=None, round_input=False, specials=False,
                         epsilon=1e-5, variant=None, pdl=None, group_size=None, ue8m0=False, column_major=False,
                         norm_out=False, stream=None):
    """One pyrms.rms_norm_quant (fused: fused_add_rms_norm_quant) launch on guarded operands, every output
    compared bit for bit with the twin: q, the per-token or per-group scales, the updated residual, and with
    norm_out the unquantized output (rms_norm_twin's, of the rounded sum when fused).

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
    ops = _allocate(rng, dt, rows, hidden, names, {n: offsets.get(n, 0) for n in names},
                    {n: strides[n] for n in names if n in strides})
    w = allocate(rng, dt, 1, hidden, misalign=offsets.get("weight", 0), low=-1.0, high=1.0)
    if specials:
        values = ops["input"].values().astype(np.float32)
        _specials(rng, values)
        ops["input"].set_values(values.astype(dt.numpy))
        ops["input"].upload()
    scale = float(np.float32(rng.uniform(0.5, 1.5) * 2.5 / float(qt.qmax)))
    ub = None if scale_ub is None else float(np.float32(rng.uniform(1.0, 3.0) if scale_ub == "device" else scale_ub))
    p = quant_plan.plan_rms_norm_quant(dt, hidden, qt, mode=mode, round_input=round_input, residual=fused, group=group_size)
    twin = dict(block=p.block, mode=mode, scale=scale, scale_ub=ub, round_input=round_input)
    grouping = {}
    if mode == "per_group":
        twin.update(group=p.group_size, ue8m0=ue8m0)
        grouping = dict(group_size=group_size, ue8m0=ue8m0, column_major_scales=column_major,
                        scale_stride=strides.get("scale"))
    x, res = ops["input"], ops.get("residual")
    if fused:
        q, scales, total = quant_twin.fused_add_rms_norm_quant_twin(x.values(), res.values(), w.values()[0], epsilon,
                                                                   qt, residual_phases=phases(res), **twin)
    else:
        q, scales = quant_twin.rms_norm_quant_twin(x.values(), w.values()[0], epsilon, qt, row_phases=phases(x), **twin)
    q = q.view(np.uint8)
    poison = next((b for b in (0xFF, 0x80, 0x55) if not np.any(q == b)), 0xFF)
    out = _guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
    extra, outputs = [], {"out": (out, q)}
    if mode == "per_token":
        sc = _guarded(np.float32, 1, rows, offsets.get("scale", 0), None, np.nan)
        outputs["scales"] = (sc, scales[None])
        extra.append(sc)
        scale_arg = sc.ptr
    elif mode == "per_group":
        laid = scales.T if column_major else scales  # the scales as they lie in memory: (groups, rows) column-major
        sc = _guarded(np.float32, *laid.shape, offsets.get("scale", 0), strides.get("scale"), np.nan)
        outputs["scales"] = (sc, laid)
        extra.append(sc)
        scale_arg = sc.ptr
    elif device_scale:
        sc = _guarded(np.float32, 1, 1, offsets.get("scale", 0), None, scale)
        extra.append(sc)
        scale_arg = sc.ptr
    else:
        sc, scale_arg = None, scale
    ub_arg, inputs = ub, {"weight": w}
    if scale_ub == "device":
        ub_op = _guarded(np.float32, 1, 1, offsets.get("scale_ub", 0), None, ub)
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
        outputs["norm_out"] = (norm, rms_twin.rms_norm_twin(
            total if fused else x.values(), w.values()[0], epsilon, block=p.block,
            row_phases=phases(res if fused else x), round_once=not round_input))
        extra.append(norm)
        common["norm_out"], common["norm_out_stride"] = norm.ptr, norm.stride
    inputs["input"] = x
    common.update(scale=scale_arg, out_dtype=qt, mode=mode, scale_ub=ub_arg, dtype=dt, input_stride=x.stride,
                  out_stride=out.stride, round_input=round_input, stream=stream, **grouping, **_pdl(pdl))
    if fused:
        launch = lambda: fused_add_rms_norm_quant(out.ptr, x.ptr, res.ptr, w.ptr, epsilon, rows, hidden,  # noqa: E731
                                                  residual_stride=res.stride, **common)
    else:
        launch = lambda: rms_norm_quant(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, **common)  # noqa: E731
    with _closing(*ops.values(), w, out, *extra):
        with forced_row_variant(variant):
            run_checked(_label("fused_add_rms_norm_quant" if fused else "rms_norm_quant", dt, rows, hidden, offsets,
                               strides, out_dtype=qt.name, mode=mode, device_scale=device_scale, scale_ub=scale_ub,
                               round_input=round_input, specials=specials, variant=variant, pdl=pdl,
                               norm_out=norm_out, **{k: v for k, v in grouping.items() if k != "scale_stride"}),
                        launch, outputs=outputs, inputs=inputs)


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
        _specials(rng, v)
    x.set_values(v.astype(dt.numpy))
    x.upload()
    if scale is None:
        scale = float(np.float32(rng.uniform(0.5, 1.5) * 4.0 / float(qt.qmax)))
    q = static_quant_twin(x.values(), scale, qt).view(np.uint8)
    # The output is poisoned with a byte the expected output does not hold; where it holds every byte (int8 over
    # its whole range), the launch runs twice, under two poisons: an element left unwritten shows one of them.
    unused = [b for b in (0xFF, 0x80, 0x55, 0xA5, 0x3C) if not np.any(q == b)]
    with _closing(x):
        for poison in unused[:1] or [0x5A, 0xA5]:
            out = _guarded(np.uint8, rows, hidden, offsets.get("out", 0), strides.get("out"), poison)
            inputs, extra, scale_arg = {"input": x}, [], scale
            if device_scale or scale_array:
                sc = _guarded(np.float32, 1, 1, offsets.get("scale", 0), None, np.float32(scale))
                extra.append(sc)
                inputs["scale"] = sc
                scale_arg = Tensor(sc.ptr, (1,), dtypes.FLOAT32) if scale_array else sc.ptr
            kwargs = dict(scale=scale_arg, out_dtype=qt, dtype=dt, input_stride=x.stride, out_stride=out.stride,
                          stream=stream, **_pdl(pdl))
            label = _label("static_quant", dt, rows, hidden, offsets, strides, out_dtype=qt.name, scale=scale,
                           device_scale=device_scale, scale_array=scale_array, specials=specials, pdl=pdl)
            with _closing(out, *extra):
                run_checked(label, lambda: static_quant(out.ptr, x.ptr, rows, hidden, **kwargs),
                            outputs={"out": (out, q)}, inputs=inputs)


SEED_TOLERANCE = {"bfloat16": (1.6e-2, 1e-3), "float16": (2e-3, 1e-4), "float32": (1e-5, 1e-6)}  # (rtol, atol)


def check_seed(rng, dtype, rows, hidden, *, epsilon=1e-5, stream=None):
    """One seed_rms_norm launch on guarded operands: inputs and the output's guards bit for bit, the
    output's rows within SEED_TOLERANCE of the float64 reference (the seed uses rsqrtf, so no twin)."""
    from pyrms.ops.seed import seed_rms_norm

    dt = dtypes.get(dtype)
    x = allocate(rng, dt, rows, hidden, low=0.2, high=1.0)  # the seed program's input ranges
    w = allocate(rng, dt, 1, hidden, low=-0.02, high=0.5)
    out = allocate(rng, dt, rows, hidden, poison=True)
    with _closing(x, w, out):
        label = f"seed {dt.name} rows={rows} hidden={hidden}"
        run_checked(label, lambda: seed_rms_norm(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, dtype=dt, stream=stream),
                    outputs={}, inputs={"input": x, "weight": w}, scratch={"out": out})
        got = out.device_values().astype(np.float64)
        want = rms_twin.rms_norm_ref(x.values(), w.values()[0], epsilon)
        rtol, atol = SEED_TOLERANCE[dt.name]
        bad = np.flatnonzero(~(np.abs(got - want) <= rtol * np.abs(want) + atol))
        if bad.size:
            raise AssertionError(f"{label}: {bad.size} outputs outside rtol={rtol} atol={atol}, first at flat "
                                 f"index {bad[:5]}: got {got.ravel()[bad[:5]]}, want {want.ravel()[bad[:5]]}")


# --- one case of tests.support.case_matrix --------------------------------------------------------------------


def checker_call(case) -> tuple:
    """(checker, its keyword arguments but rng and stream) that run a tests.support.case_matrix.Case; pure."""
    o, s, opt = case.offset, case.stride, case.option
    common = dict(dtype=case.dtype, hidden=case.hidden, epsilon=opt("epsilon"))
    if case.op == "seed_rms_norm":
        return check_seed, dict(common, rows=case.rows)
    if registry.get(case.op).check == "static_quant":
        return check_static_quant, dict(dtype=case.dtype, hidden=case.hidden, rows=case.rows,
                                        out_dtype=opt("out_dtype"), offsets=dict(case.offsets),
                                        strides=dict(case.strides), device_scale=opt("device_scale"),
                                        specials=opt("specials"), pdl=opt("pdl"))
    offsets, strides = dict(case.offsets), dict(case.strides)
    shared = dict(common, pdl=opt("pdl"), weight=opt("weight"))
    if case.op in ("rms_norm", "rms_norm_nd", "fused_add_rms_norm", "layer_norm"):  # the mixed-dtype output
        shared.update(out_dtype=None if opt("out_kind") == "same" else opt("out_kind"))
    if case.op == "rms_norm_nd":
        return check_rms_norm_nd, dict(
            shared, sizes=opt("sizes"), in_strides=s("input"), out_strides=s("out"), in_off=o("input"),
            out_off=o("out"), w_off=o("weight"), per_row=opt("per_row"), w_stride=s("weight"),
            in_place=opt("in_place") == "input", gemma=opt("gemma"), round_once=opt("round_once"),
            as_arrays=opt("as_arrays"))
    shared.update(rows=case.rows)
    if case.op == "rms_norm":
        return check_rms_norm, dict(
            shared, in_off=o("input"), w_off=o("weight"), out_off=o("out"), in_stride=s("input"),
            out_stride=s("out"), gemma=opt("gemma"), round_once=opt("round_once"),
            in_place=opt("in_place") == "input", variant=opt("variant"))
    if case.op == "fused_add_rms_norm":
        return check_fused_add_rms_norm, dict(shared, offsets=offsets, strides=strides, gemma=opt("gemma"),
                                              round_once=opt("round_once"), variant=opt("variant"),
                                              sum_precision=opt("sum_precision"), residual_dtype=opt("residual_dtype"))
    if case.op == "layer_norm":
        return check_layer_norm, dict(shared, offsets=offsets, strides=strides, in_place=opt("in_place") == "input",
                                      bias=opt("bias"), variant=opt("variant"), rms=opt("rms"))
    if case.op in ("rms_norm_quant", "fused_add_rms_norm_quant"):
        return check_rms_norm_quant, dict(
            common, rows=case.rows, pdl=opt("pdl"), out_dtype=opt("out_dtype"), mode=opt("mode"),
            fused=case.op == "fused_add_rms_norm_quant", offsets=offsets, strides=strides,
            device_scale=opt("device_scale"), scale_ub=opt("scale_ub"), round_input=opt("round_input"),
            specials=opt("specials"), variant=opt("variant"), group_size=opt("group_size"), ue8m0=opt("ue8m0"),
            column_major=opt("column_major"), norm_out=opt("norm_out"))
    layer_norm = case.op == "layer_norm_backward"
    return check_norm_backward, dict(
        shared, layer_norm=layer_norm, offsets=offsets, strides=strides, in_place=opt("in_place"),
        gemma=opt("gemma"), grad_dtype=opt("grad_dtype"), rows_per_block=opt("rows_per_block"),
        own_workspace=opt("own_workspace"), grad_bias=opt("grad_bias"), grad_output_kind=opt("grad_output_kind"),
        bias=opt("rms_bias"))


def check_case(rng, case, *, stream=None):
    """Run one tests.support.case_matrix.Case through its checker on the GPU (AssertionError names what differs);
    what the checker returns (the backward passes: their outputs, for comparing launches)."""
    check, kwargs = checker_call(case)
    return check(rng, stream=stream, **kwargs)

"""Guarded, poisoned device operands at chosen alignments and strides, for proving kernels correct.

Each operand lives inside its own allocation: GUARD elements before and after, and between
strided rows, all filled with a known pattern. Outputs are poisoned with 0xFF bytes (a NaN in
every dtype, and a bit pattern no kernel result has), so that an unwritten element and a write
outside the rows both show up in a bytewise comparison of the whole allocation.

What the checkers share is here, with the backward's checker that both norms share (check_norm_backward); each
op's own checker is beside its tests, in tests/ops/<family>/cases.py (tests.support.op_tests), as check_rms_norm
in tests/ops/rms_norm/cases.py.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from pyrms import driver, dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops import registry
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops._row_twin import row_stats_twin
from tests.support import op_tests

GUARD = 64  # elements on each side: more than one 16-byte vector in every dtype


def bits(a: np.ndarray) -> np.ndarray:
    """Raw bits, so that NaN compares equal to itself and -0 differs from +0."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


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
def closing(*operands: Rows):
    try:
        yield
    finally:
        for operand in {id(o): o for o in operands}.values():
            operand.close()


def pdl_option(pdl) -> dict:
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


def weight_operand(rng, dt, hidden, kind: str, offset: int, rows: int = 1, stride: int | None = None):
    """The guarded weight of a row op's check: of the dtype ("same"), float32, or none (None); `rows`
    rows `stride` apart for a weight per outer row."""
    if kind not in plan.WEIGHT_KINDS:
        raise ValueError(f"weight must be one of {plan.WEIGHT_KINDS}, got {kind!r}")
    if kind == "none":
        return None
    return allocate(rng, dtypes.FLOAT32 if kind == "float32" else dt, rows, hidden, misalign=offset, stride=stride,
                    low=-1.0, high=1.0)


def weight_args(w, kind: str):
    """(pointer, twin values, the op's weight_dtype) of a check's weight."""
    if w is None:
        return None, None, None
    return w.ptr, w.values()[0], ("float32" if kind == "float32" else None)


# --- the rest of the family: operands named as the ops name their arguments ------------------------

_RANGES = {"weight": (-1.0, 1.0), "bias": (-1.0, 1.0), "grad_output": (-1.0, 1.0)}


def allocate_named(rng, dt, rows, hidden, names, offsets, strides, *, vectors=(), outputs=(), out_dtype=None,
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


def case_label(op: str, dt, rows, hidden, offsets, strides, **options) -> str:
    extra = " ".join(f"{k}={v}" for k, v in options.items() if v not in (None, False))
    return f"{op} {dt.name} rows={rows} hidden={hidden} offsets={offsets or {}} strides={strides or {}} {extra}"


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
    ops = allocate_named(rng, dt, rows, hidden, names, rows_offsets, strides, vectors=("weight",) * weighted + params,
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
            saved = guarded(np.float32, 1, rows, (offsets or {}).get(name, 0), None, np.nan)
            saved.set_values(values[name][None])
            saved.upload()
            ops[name] = saved
    with closing(*ops.values(), *([ws] if ws else [])):
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
                      grad_output_dtype=own_dtypes.get("grad_output"), **pdl_option(pdl))
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
        run_checked(case_label("layer_norm_backward" if layer_norm else "rms_norm_backward", dt, rows, hidden, offsets,
                               strides, in_place=in_place, gemma=gemma, grad_dtype=grad_dtype,
                               rows_per_block=rows_per_block, own_workspace=own_workspace,
                               no_grad_bias=layer_norm and not grad_bias, pdl=pdl,
                               weight=None if weight == "same" else weight,
                               grad_output=None if grad_output_kind == "same" else grad_output_kind,
                               rstd=rstd, bias=bias),
                    launch, outputs={"grad_input": (dx, want[0]), **{name: (ops[name], wanted[name][None]) for name in params}},
                    inputs=inputs, scratch={"workspace": ws} if ws else None)
        return {"grad_input": dx.device_values(), **{name: ops[name].download()[ops[name].index(0)] for name in params}}


# --- quantized outputs -----------------------------------------------------------------------------


def _raw(host: np.ndarray, offset: int, rows: int, hidden: int, stride: int) -> Rows:
    """A guarded operand of any numpy dtype (a quantized output's bytes, fp32 scales) holding `host`."""
    operand = Rows(driver.DeviceBuffer(host.nbytes), host, offset, rows, hidden, stride)
    operand.upload()
    return operand


def guarded(dtype: np.dtype, rows: int, hidden: int, misalign: int, stride: int | None, fill) -> Rows:
    stride = hidden if stride is None else stride
    total = GUARD + misalign + (rows - 1) * stride + hidden + GUARD
    return _raw(np.full(total, fill, dtype=dtype), GUARD + misalign, rows, hidden, stride)


def put_specials(rng, values: np.ndarray) -> None:
    """NaN, +inf and -inf in row 0 and an all-zero last row (per-token's minimum scale), in place."""
    cols = rng.choice(values.shape[1], size=min(3, values.shape[1]), replace=False)
    for col, special in zip(cols, (np.nan, np.inf, -np.inf)):
        values[0, col] = special
    if values.shape[0] > 1:
        values[-1] = 0


# --- one case of tests.support.case_matrix: each op's call is in its folder (tests.support.op_tests) ---------------


def case_common(case) -> dict:
    """The keyword arguments every checker takes from a case: dtype, hidden size, epsilon."""
    return dict(dtype=case.dtype, hidden=case.hidden, epsilon=case.option("epsilon"))


def row_kwargs(case, *, out: bool = False) -> dict:
    """case_common and the options of every normalizing op's checker: pdl and the weight kind; ``out``: also the
    mixed-dtype output (the checkers' out_dtype, from the case's out_kind)."""
    kwargs = dict(case_common(case), pdl=case.option("pdl"), weight=case.option("weight"))
    if out:
        kwargs.update(out_dtype=None if case.option("out_kind") == "same" else case.option("out_kind"))
    return kwargs


def backward_checker_call(case, *, layer_norm: bool) -> tuple:
    """(check_norm_backward, its keyword arguments) that run a case of RMSNorm's (or LayerNorm's) backward."""
    opt = case.option
    return check_norm_backward, dict(
        row_kwargs(case), rows=case.rows, layer_norm=layer_norm, offsets=dict(case.offsets),
        strides=dict(case.strides), in_place=opt("in_place"), gemma=opt("gemma"), grad_dtype=opt("grad_dtype"),
        rows_per_block=opt("rows_per_block"), own_workspace=opt("own_workspace"), grad_bias=opt("grad_bias"),
        grad_output_kind=opt("grad_output_kind"), bias=opt("rms_bias"))


def checker_call(case) -> tuple:
    """(checker, its keyword arguments but rng and stream) that run a tests.support.case_matrix.Case: the call
    of its op's tests (tests.support.op_tests); pure."""
    return op_tests.of(case.op).checker_call(case)


def check_case(rng, case, *, stream=None):
    """Run one tests.support.case_matrix.Case through its checker on the GPU (AssertionError names what differs);
    what the checker returns (the backward passes: their outputs, for comparing launches)."""
    check, kwargs = checker_call(case)
    return check(rng, stream=stream, **kwargs)

"""``pyrms.rms_norm_quant`` and ``pyrms.fused_add_rms_norm_quant``: RMSNorm (after vLLM's residual add) with
an fp8 or int8 output and a static, per-token or per-group scale (kernels: cuda_src/rms_norm_quant.cu; the
semantics: docs/numerics.md, "Quantized outputs"; the twin: pyrms.reference.rms_norm_quant_twin)."""
from __future__ import annotations

import math
import numbers
from types import SimpleNamespace

from ... import dtypes
from .. import _row_plan as planner
from .. import _adapter, _operands as check
from . import arrays as _quant_arrays
from .. import _explain, _placement
from ..._types import DTypeLike, Operand, OptionalOperand, StreamLike
from .._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl
from . import plan as quant_plan

# Leading arguments: out, norm_out, input, [residual,] weight, scales, given_ptr, given, epsilon; then the packed
# tail (hidden, the row strides, out's and norm_out's last). Per group: out, norm_out, input, [residual,] weight,
# scales, scale_row_stride, scale_group_stride, epsilon; then group_shift, ue8m0 and the same tail. Without a
# norm_out, its pointer is 0 and its stride hidden (the kernels without NORM_OUT read neither).
# Up to this many rows the latency kernel launches (plan.FEW_ROWS; tests.support.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS
_OUT_DTYPE = dtypes.FLOAT8_E4M3FN  # where out_dtype is None and out is a raw pointer
_PLAIN = (int, float, type(None))  # scale and scale_ub kinds the raw-pointer path reads itself (else: _arrays)


def group_scales_span(groups: int, column_major: bool, scale_stride, num_tokens: int) -> tuple[tuple, str]:
    """The explain path's per-group scales of a call: (their span for the overlap checks, what they must be);
    ValueError for a column-major group stride that would make one group's tokens overlap the next group's."""
    _, group_stride, (_, *span) = group_scales(groups, column_major, scale_stride)
    if column_major and group_stride is not None and group_stride < num_tokens:
        raise ValueError(f"scale_stride must be >= num_tokens ({num_tokens}) for column-major scales, so the "
                         f"tokens of one group do not overlap the next group's, got {group_stride}")
    return (span[0], span[1]), " to the per-group float32 scales, or a float32 (num_tokens, groups) array"


def group_scales(groups: int, column_major: bool, scale_stride) -> tuple[int, int | None, tuple]:
    """Per group: (scale_row_stride, scale_group_stride or None for num_tokens, the scales' operand for
    Pointers) of (rows, groups) fp32 scales, row-major (row stride scale_stride, default groups) or column-major
    (memory (groups, rows), group stride scale_stride, default num_tokens: DeepGEMM pads it to a multiple of 4).
    A column-major span of group stride S covers (groups - 1) * S + rows elements: a row stride of 1 and
    rows of (groups - 1) * S + 1; without S, groups * rows, as row-major. ValueError for a stride too small."""
    if scale_stride is not None:
        scale_stride = check.size("scale_stride", scale_stride, check.INT64_MAX // 16)
    if not column_major:
        row_stride = groups if scale_stride is None else scale_stride
        if row_stride < groups:
            raise ValueError(f"scale_stride must be >= the groups per row ({groups}) for row-major scales, so rows "
                             f"do not overlap, got {row_stride}")
        return row_stride, 1, (4, row_stride, groups)
    if scale_stride is None:
        return 1, None, (4, groups, groups)
    return 1, scale_stride, (4, 1, (groups - 1) * scale_stride + 1)


def _no_lone_norm_out_stride(norm_out: bool, norm_out_stride) -> None:
    """ValueError for a norm_out_stride given without a norm_out (the prepared launch's check; the explain path's
    is its declaration's, an optional row operand)."""
    if not norm_out and norm_out_stride is not None:
        raise ValueError(f"norm_out_stride applies with a norm_out only, got norm_out_stride={norm_out_stride!r} "
                         f"and norm_out=None")


class Prepared:
    """One (device, dtype, output dtype, mode, hidden, strides, options, where the scale is, the per-group
    layout, whether there is a norm_out) of the quantizing ops, resolved once. `given_on_device`: the static
    scale (or per-token's scale_ub) is read from a device pointer, not passed as a value. A call checks
    pointers, rows, epsilon and the scale value; False launches nothing and the general path names what is
    wrong."""

    __slots__ = ("rows", "max_rows", "pointers", "per_token", "placed", "residual", "given_on_device", "value_allowed",
                 "grouped", "scale_strides", "norm_out")

    def __init__(self, device, residual, dtype, out_dtype, mode, hidden, input_stride, residual_stride, out_stride,
                 round_input, given_on_device, pdl, norm_out, norm_out_stride, sum_precision, group_size=None,
                 ue8m0=False, column_major_scales=False, scale_stride=None):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        self.norm_out = norm_out = check.flag("norm_out", norm_out)
        _no_lone_norm_out_stride(norm_out, norm_out_stride)
        p = quant_plan.plan_rms_norm_quant(dt, hidden, out_dtype, mode=mode, round_input=check.flag("round_input", round_input),
                                        residual=bool(residual), group=group_size, norm_out=norm_out,
                                        sum_precision=sum_precision)
        ue8m0, column_major = check.flag("ue8m0", ue8m0), check.flag("column_major_scales", column_major_scales)
        self.grouped = mode == "per_group"
        if not self.grouped and (ue8m0 or column_major or scale_stride is not None):
            raise ValueError(f"ue8m0, column_major_scales and scale_stride apply to mode='per_group' only, not {mode!r}")
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        n_stride = check.stride_arg("norm_out_stride", norm_out_stride, hidden)
        strides = (x_stride, check.stride_arg("residual_stride", residual_stride, hidden)) if residual else (x_stride,)
        self.residual, self.per_token = bool(residual), mode == "per_token"
        self.given_on_device = check.flag("given_on_device", given_on_device)
        if self.per_token and p.out_dtype.integer and self.given_on_device:
            raise ValueError("scale_ub applies to float8 outputs only (as in vLLM), not int8")
        if self.grouped and self.given_on_device:
            raise ValueError("scale_ub applies to mode='per_token' only")
        # `given` is a static scale, or per-token's scale_ub (+inf: none; int8 has none).
        self.value_allowed = not (self.per_token and p.out_dtype.integer)
        tail = (hidden, *strides, o_stride, n_stride)
        if self.grouped:
            row_stride, group_stride, scales = group_scales(hidden // p.group_size, column_major, scale_stride)
            self.scale_strides = (row_stride, group_stride, column_major)
            tail = (p.group_shift, int(ue8m0), *tail)
        self.rows = RowLaunches(p, tail, device, use_pdl(device, pdl),
                                (*strides, o_stride, n_stride))
        self.max_rows = check.max_rows(hidden, *strides, o_stride, n_stride)
        # In call order: out, input, [residual,] weight, [scales,] [given,] [norm_out]; what is written is
        # disjoint from all.
        operands: list[tuple[int, ...]] = [(1, o_stride), *((dt.itemsize, s) for s in strides), (dt.itemsize, 0)]
        written = [0] + ([2] if residual else [])
        if self.per_token or self.grouped:
            written.append(len(operands))
            operands.append(scales if self.grouped else (4, 1, 1))
        if self.given_on_device:
            operands.append((4, 0, 1))
        if norm_out:
            written.append(len(operands))
            operands.append((dt.itemsize, n_stride))
        pairs = {(min(i, j), max(i, j)) for i in written for j in range(len(operands)) if i != j}
        self.pointers = Pointers(hidden, operands, [(i, j, False) for i, j in sorted(pairs)])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, given: float, epsilon, num_tokens, stream) -> bool:
        """pointers: (out, input, [residual,] weight, [scales,] [given pointer,] [norm_out]), as in __init__."""
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and self.pointers.ok(pointers, num_tokens)
                and type(given) is float):
            return False
        if self.grouped:
            # per group: no scale_ub (given is +inf); column-major scales (row stride 1) with a group stride of at
            # least the rows, num_tokens where none was given
            row_stride, group_stride, column_major = self.scale_strides
            if group_stride is None:
                group_stride = num_tokens
            if given != math.inf or (column_major and group_stride < num_tokens):
                return False
        elif not ((given == math.inf and self.per_token)
                  or (self.value_allowed and check.FLOAT32_TINY <= given <= check.FLOAT32_MAX)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        rows = 3 if self.residual else 2  # out, input, [residual], weight (and norm_out): the alignment test's
        norm_out = pointers[-1] if self.norm_out else 0
        pointers_or = norm_out
        for ptr in pointers[:rows + 1]:
            pointers_or |= ptr
        if self.grouped:  # the kernels take norm_out second
            self.rows(_FEW_ROWS, num_tokens, handle, pointers_or, pointers[0], norm_out, *pointers[1:rows + 2],
                      row_stride, group_stride, epsilon)
            return True
        scales = pointers[rows + 1] if self.per_token else 0
        given_ptr = pointers[rows + 1 + self.per_token] if self.given_on_device else 0  # past the scales
        self.rows(_FEW_ROWS, num_tokens, handle, pointers_or, pointers[0], norm_out, *pointers[1:rows + 1], scales,
                  given_ptr, given, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def rms_norm_quant(out: Operand, input: Operand, weight: Operand, epsilon: float, num_tokens: int | None = None,
                   hidden_size: int | None = None, *, scale: float | Operand, out_dtype: DTypeLike | None = None,
                   mode: str = "static", scale_ub: float | Operand | None = None, group_size: int | None = None,
                   ue8m0: bool = False, column_major_scales: bool = False, scale_stride: int | None = None,
                   dtype: DTypeLike | None = None, input_stride: int | None = None, out_stride: int | None = None,
                   norm_out: OptionalOperand = None, norm_out_stride: int | None = None,
                   stream: StreamLike = None, round_input: bool = False, pdl: bool = True) -> None:
    """RMSNorm of each row of ``input`` quantized into ``out`` (``out_dtype``: 'float8_e4m3fn',
    'float8_e5m2' or 'int8', or their numpy or torch dtypes; None, the default: out's own dtype where out is an
    array that names one, else 'float8_e4m3fn'; docs/numerics.md gives every formula).

    ``y = (x * inv_rms) * weight`` in fp32 (``round_input=True``: the plain RMSNorm's output rounded to the input
    dtype, what vLLM's kernels quantize), then ``mode``:

    - ``'static'``: ``q = saturate(round(y / scale))``; ``scale`` a Python float (finite, > 0, within
      float32), or one fp32 that the kernel reads (its value not checked: as in vLLM): a device pointer (int),
      or a float32 array of one element (shape () or (1,), as vLLM's scale tensors are).
    - ``'per_token'``: each row's ``s = max(min(max|y|, scale_ub) / qmax, min_scale)`` is written to
      ``scale``: a device pointer (int) to ``num_tokens`` fp32, or a contiguous float32 array of shape
      ``(num_tokens,)`` or ``(num_tokens, 1)``; ``q = saturate(round(y / s))``. ``scale_ub`` (float8 outputs
      only): None, a float > 0, or one fp32 the kernel reads (a device pointer, or a one-element float32 array).
    - ``'per_group'``: the same per group of ``group_size`` (64 or 128, default 128; it must divide
      hidden_size, at most quant_plan.MAX_GROUPS groups) consecutive elements of a row, without scale_ub; with
      ``ue8m0`` each scale is rounded up to a power of two (DeepSeek's UE8M0). ``scale``: a device pointer (int)
      to the (num_tokens, hidden_size / group_size) fp32 scales, row-major with row stride ``scale_stride``
      (default: the groups), or with ``column_major_scales`` stored transposed, (groups, num_tokens) row-major
      as DeepGEMM-style GEMMs read them, with group stride ``scale_stride`` (default num_tokens; a padded
      one, e.g. to a multiple of 4, leaves the padding untouched). Or a float32 array of shape (num_tokens,
      groups): row-major, strides (S, 1) with S >= groups; with ``column_major_scales``, the transpose of a
      (groups, S) row-major buffer, strides (1, S) with S >= num_tokens (``buf.t()[:num_tokens]``, or vLLM's
      ``.permute(-1, -2)``). S is the scale_stride (one given must agree); the layout is never guessed from
      the strides: ``column_major_scales`` says which is meant, and other strides are refused.

    ``norm_out`` (optional): the unquantized output beside the quantized one, rows of ``norm_out_stride``
    (default hidden_size) elements of the input's dtype: ``y`` rounded to it, bit for bit the plain RMSNorm's
    output (its default rounding with ``round_input=True``, ``round_once=True``'s without), for a caller whose
    next GEMM reads ``out`` and another consumer the unquantized rows. A raw pointer or an array.

    ``out``: a device pointer (int) to rows of ``out_stride`` (default hidden_size) 1-byte elements, at any
    address; or an array of [..., hidden_size] rows like ``input``'s (leading dimensions that collapse to one
    row stride, contiguous along the hidden dimension; num_tokens, hidden_size and out_stride default to its)
    of float8_e4m3fn, float8_e5m2 or int8: torch tensors of those dtypes, DLPack arrays of them, or
    ``__cuda_array_interface__`` typestr '|i1' (int8). Its dtype and an out_dtype given must agree (an int8
    array is int8). 1-byte storage that names no quantized dtype (torch.uint8, typestr '|u1', '<V1' or '<f1',
    DLPack uint8: torch's own interface cannot export fp8) holds what ``out_dtype`` names, which must then be
    given. ``input`` and ``weight``: raw pointers or arrays, as every pyrms op takes them (the weight of the
    input's dtype); raw pointers and arrays mix freely. What is written (``out``, ``norm_out``,
    per-token or per-group scales) must not overlap anything else.
    ``epsilon``, ``dtype``, ``stream``, ``pdl``: as every pyrms op takes them. Everything is validated before
    the launch; the launch is asynchronous on ``stream``.
    """
    _run(False, out, input, None, weight, epsilon, num_tokens, hidden_size, scale, out_dtype, mode, scale_ub,
         (group_size, ue8m0, column_major_scales, scale_stride), dtype, input_stride, None, out_stride, norm_out,
         norm_out_stride, stream, round_input, pdl, None)


def fused_add_rms_norm_quant(out: Operand, input: Operand, residual: Operand, weight: Operand, epsilon: float,
                             num_tokens: int | None = None, hidden_size: int | None = None, *,
                             scale: float | Operand, out_dtype: DTypeLike | None = None, mode: str = "static",
                             scale_ub: float | Operand | None = None, group_size: int | None = None,
                             ue8m0: bool = False, column_major_scales: bool = False,
                             scale_stride: int | None = None, dtype: DTypeLike | None = None,
                             input_stride: int | None = None, residual_stride: int | None = None,
                             out_stride: int | None = None, norm_out: OptionalOperand = None,
                             norm_out_stride: int | None = None, stream: StreamLike = None, round_input: bool = False,
                             pdl: bool = True, sum_precision: str | None = None) -> None:
    """The residual add, then ``rms_norm_quant`` of the sum. ``residual`` is updated in place (``input`` is
    only read) and ``out`` is the quantized RMSNorm of the sum; ``sum_precision`` says which sum:

    - ``'rounded'`` (None, the default; vLLM's ``fused_add_rms_norm_static_fp8_quant`` and its dynamic kernels):
      ``residual <- round(input + residual)``, and that rounded sum is normalized, bit for bit
      ``rms_norm_quant(out, residual, ...)`` on the new residual.
    - ``'fp32'`` (FlashInfer's ``fused_add_rmsnorm_quant``): the sum ``input + residual`` in fp32 is normalized
      and quantized, never rounded first; the residual stores it rounded to its dtype (the unquantized
      fused add's ``sum_precision='fp32'`` semantics). bf16 and fp16 rows; float32 rows have
      one semantics (their sum is never rounded), so both spellings give the same bits there.
      Where it differs from FlashInfer: inv_rms is ``1 / sqrt`` correctly rounded (FlashInfer: ``rsqrt``) over
      pyrms's fixed reduction tree, so a row's result is batch invariant; FlashInfer clamps before the cast,
      so its NaN becomes +qmax, where pyrms writes NaN (docs/numerics.md); beside FlashInfer's fp8 static scale
      (a tensor or a float, ``y * (1/scale)``, the same product as pyrms's), pyrms has every mode and int8.

    The arguments as in ``rms_norm_quant`` (``out`` and ``scale`` arrays too); ``residual`` with its own
    ``residual_stride``, disjoint from the rest; ``norm_out`` the sum's RMSNorm, unquantized.
    """
    _run(True, out, input, residual, weight, epsilon, num_tokens, hidden_size, scale, out_dtype, mode, scale_ub,
         (group_size, ue8m0, column_major_scales, scale_stride), dtype, input_stride, residual_stride, out_stride,
         norm_out, norm_out_stride, stream, round_input, pdl, sum_precision)


def _given(mode, scale, scale_ub) -> tuple[float, int | None]:
    """(the kernel's `given` value, its device pointer or None) for these scale arguments (checked later)."""
    source = scale if mode == "static" else scale_ub
    if type(source) is int:
        return 1.0, source
    if source is None and mode != "static":
        return math.inf, None
    return (float(source) if isinstance(source, numbers.Real) and not isinstance(source, bool) else source), None


def _arrays(out, scale, scale_ub, out_dtype, out_stride, num_tokens, hidden_size, dtype, mode, grouping) -> tuple:
    """(out, out_dtype, out_stride, scale, scale_ub, grouping, num_tokens, hidden_size) of the raw-pointer call
    for an array ``out``, ``scale`` or ``scale_ub``: pointers, out's row stride and dtype, per-group scales'
    scale_stride in ``grouping``, read and checked against the sizes (taken from out where None); num_tokens
    0 for an empty out. Whatever is not an array is passed on as it is, for the raw path to check."""
    if type(out) is not int:
        out, out_stride, out_dtype, num_tokens, hidden_size = _quant_arrays.quantized_out(
            out, out_stride, out_dtype, num_tokens, hidden_size)
        if num_tokens == 0:
            return out, out_dtype, out_stride, scale, scale_ub, grouping, num_tokens, hidden_size
    if _adapter.is_array(scale_ub):
        scale_ub = _quant_arrays.scalar_array("scale_ub", scale_ub)
    if _adapter.is_array(scale):  # in an unknown mode it is left as it is: the checks after name the mode
        if mode == "static":
            scale = _quant_arrays.scalar_array("scale", scale)
        elif mode == "per_token":
            scale = _quant_arrays.token_scales(scale, check.sizes(num_tokens, hidden_size)[0])
        elif mode == "per_group":  # the groups of a valid group_size (the plan's checks, with their messages)
            rows, hidden = check.sizes(num_tokens, hidden_size)
            group_size, ue8m0, column_major, scale_stride = grouping
            groups = hidden // quant_plan.plan_rms_norm_quant(dtypes.BFLOAT16 if dtype is None else dtype, hidden,
                                                           _OUT_DTYPE if out_dtype is None else out_dtype, mode=mode,
                                                           group=group_size).group_size
            scale, scale_stride = _quant_arrays.group_scale_array(
                scale, rows, groups, check.flag("column_major_scales", column_major), scale_stride)
            grouping = (group_size, ue8m0, column_major, scale_stride)
    return out, out_dtype, out_stride, scale, scale_ub, grouping, num_tokens, hidden_size


def _run(residual, out, input, res, weight, epsilon, num_tokens, hidden_size, scale, out_dtype, mode, scale_ub,
         grouping, dtype, input_stride, residual_stride, out_stride, norm_out, norm_out_stride, stream, round_input,
         pdl, sum_precision) -> None:
    """grouping: (group_size, ue8m0, column_major_scales, scale_stride), as given."""
    if not (type(input) is int and type(weight) is int and (res is None or type(res) is int)
            and (norm_out is None or type(norm_out) is int)):
        rows = [("input", input, input_stride, "input_stride", False)]
        if residual:
            rows.append(("residual", res, residual_stride, "residual_stride", True))
        if norm_out is not None:
            rows.append(("norm_out", norm_out, norm_out_stride, "norm_out_stride", True))
        dt, num_tokens, hidden_size, found = check.arrays(dtype, num_tokens, hidden_size, rows=rows,
                                                          vectors=[("weight", weight)])
        if num_tokens == 0:
            return
        (input, input_stride), (weight, _) = found["input"], found["weight"]
        if residual:
            res, residual_stride = found["residual"]
        if norm_out is not None:
            norm_out, norm_out_stride = found["norm_out"]
        dtype = dt
    if type(out) is not int or type(scale) not in _PLAIN or type(scale_ub) not in _PLAIN:
        out, out_dtype, out_stride, scale, scale_ub, grouping, num_tokens, hidden_size = _arrays(
            out, scale, scale_ub, out_dtype, out_stride, num_tokens, hidden_size, dtype, mode, grouping)
        if num_tokens == 0:
            return
    if out_dtype is None:
        out_dtype = _OUT_DTYPE
    given, given_ptr = _given(mode, scale, scale_ub)
    pointers = (out, input, *((res,) if residual else ()), weight, *((scale,) if mode != "static" else ()),
                *((given_ptr,) if given_ptr is not None else ()), *((norm_out,) if norm_out is not None else ()))
    static = (residual, dtype, out_dtype, mode, hidden_size, input_stride, residual_stride, out_stride, round_input,
              given_ptr is not None, pdl, norm_out is not None, norm_out_stride, sum_precision, *grouping)
    prepared = _prepared.get(*static)
    if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, given, epsilon,
                                                                                     num_tokens, stream):
        return
    static_mode = mode == "static"
    _explain.explain(_DECLARATION, dict(
        out=out, input=input, residual=res, weight=weight, scales=None if static_mode else scale,
        scale=given_ptr if static_mode else None, scale_ub=None if static_mode else given_ptr, norm_out=norm_out,
        given=given, scale_ub_given=scale_ub, with_residual=residual, grouping=grouping, mode=mode, epsilon=epsilon,
        num_tokens=num_tokens, hidden_size=hidden_size, dtype=dtype, out_dtype=out_dtype, input_stride=input_stride,
        residual_stride=residual_stride, out_stride=out_stride, norm_out_stride=norm_out_stride, stream=stream, pdl=pdl,
        round_input=round_input, sum_precision=sum_precision))
    launched = _prepared.require(*static)(pointers, given, float(epsilon), int(num_tokens), stream)
    assert launched, "the checks above accept what the prepared launch declines"


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """The quantizing ops' own checks for the shared explain path (the mode, the output dtype, the scale's and the
    per-group layout's options, the scale's value), and per call: which operands there are, their dtypes, the
    scales' span and what they must be."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    qt, mode = dtypes.quantized(call["out_dtype"]), call["mode"]
    if mode not in quant_plan.QUANT_MODES:
        raise ValueError(f"mode must be one of {quant_plan.QUANT_MODES}, got {mode!r}")
    group_size, ue8m0, column_major, scale_stride = call["grouping"]
    p = quant_plan.plan_rms_norm_quant(dt, hidden, qt, mode=mode, group=group_size, residual=call["with_residual"],
                                       sum_precision=call["sum_precision"])
    check.flag("ue8m0", ue8m0)
    check.flag("column_major_scales", column_major)
    if mode == "per_token":
        if call["scale_ub_given"] is not None and qt.integer:
            raise ValueError("scale_ub applies to float8 outputs only (as in vLLM), not int8")
    elif call["scale_ub_given"] is not None:
        raise ValueError("scale_ub applies to mode='per_token' only")
    if mode != "per_group" and (ue8m0 or column_major or scale_stride is not None):
        raise ValueError(f"ue8m0, column_major_scales and scale_stride apply to mode='per_group' only, not {mode!r}")
    check.scale_value("scale" if mode == "static" else "scale_ub", call["given"], inf_ok=mode != "static")
    scales, kind = _explain.PER_ROW, " to num_tokens float32, or a float32 array of them"
    if mode == "per_group":
        scales, kind = group_scales_span(hidden // p.group_size, column_major, scale_stride, num_tokens)
    return SimpleNamespace(dtype=dt, out_dtype=qt, residual=dt if call["with_residual"] else None,
                           scales=None if mode == "static" else dtypes.FLOAT32, scales_span=scales,
                           scales_kind="a device pointer (int)" + kind)


# In call order: out, input, [residual,] weight, [scales,] [the scale or scale_ub read from a device pointer,]
# [norm_out]; what is written (out, residual, norm_out, the per-token or per-group scales) is disjoint from all.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("residual", _explain.Fact("residual"), stride="residual_stride", written=True),
              _explain.Memory("weight"),
              _explain.Memory("scale", _explain.Fact("scales"), span=_explain.Fact("scales_span"), written=True,
                              kind=_explain.Fact("scales_kind"), key="scales"),
              _explain.Memory("scale", dtypes.FLOAT32, span=_explain.ONE, optional=True),
              _explain.Memory("scale_ub", dtypes.FLOAT32, span=_explain.ONE, optional=True),
              _explain.Memory("norm_out", stride="norm_out_stride", written=True, optional=True)),
    facts=_facts, flags=("pdl", "round_input"), strides=("input_stride", "out_stride"), its_elements=True)

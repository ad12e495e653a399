"""``pyrms.dynamic_quant``: a standalone dynamic fp8/int8 quantizer, per tensor, per token or per group: vLLM's
``scaled_fp8_quant`` and ``scaled_int8_quant`` without a scale, and ``per_token_group_quant_fp8`` (kernels:
cuda_src/dynamic_quant.cu; the twin: pyrms.ops.dynamic_quant.twin.dynamic_quant_twin)."""
from __future__ import annotations

import math
import numbers
from types import SimpleNamespace
from typing import Any

from ... import dtypes, launch
from .. import _adapter, _operands as check
from .. import _explain, _placement
from ..._types import DTypeLike, Operand, StreamLike
from .._prepared import Pointers, PreparedCache, use_pdl
from ..rms_norm_quant import arrays as _quant_arrays
from ..rms_norm_quant.op import group_scales, group_scales_span
from . import plan as dq_plan

_OUT_DTYPE = dtypes.FLOAT8_E4M3FN  # where out_dtype is None and out is a raw pointer
_DEFAULT_DTYPE = dtypes.BFLOAT16
_PLAIN = (int, float, type(None))  # scale and scale_ub kinds the raw-pointer path reads itself

# The row kernel's arguments: out, scales, input, ub_ptr, ub, scale_group_stride (the call's), then the packed tail
# floor, scale_row_stride, group_shift, ue8m0, hidden, input_stride, out_stride (the prepared launch's). The maxima
# kernel's (per tensor): scale, input, rows, reset, then floor, hidden, input_stride.


def _ub_error(mode: str, out_dtype: dtypes.QuantDType) -> str | None:
    """Why this mode and output dtype take no scale_ub (vLLM's rules), or None where they do."""
    if mode != "per_token":
        return f"scale_ub applies to mode='per_token' only, not {mode!r}"
    if out_dtype.integer:
        return "scale_ub applies to float8 outputs only (as in vLLM), not int8"
    return None


def _layout_error(mode: str, ue8m0, column_major, scale_stride) -> str | None:
    """Why the per-group layout options are refused outside per group, or None."""
    if mode != "per_group" and (ue8m0 or column_major or scale_stride is not None):
        return f"ue8m0, column_major_scales and scale_stride apply to mode='per_group' only, not {mode!r}"
    return None


class Prepared:
    """One (device, dtype, output dtype, mode, hidden, strides, where scale_ub is, the per-group layout, pdl) of
    dynamic_quant, resolved once. A call checks the pointers, the rows and scale_ub's value; False launches nothing
    and the general path names what is wrong."""

    __slots__ = ("kernel", "launch", "amax_kernel", "amax_launch", "pointers", "max_rows", "placed", "ub_on_device",
                 "ub_allowed", "column_major", "group_stride")

    def __init__(self, device, dtype, out_dtype, mode, hidden, input_stride, out_stride, ub_on_device, group_size,
                 ue8m0, column_major_scales, scale_stride, pdl):
        hidden = check.size("hidden_size", hidden)
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        p = dq_plan.plan_dynamic_quant(dt, hidden, out_dtype, mode, group_size)
        ue8m0, column_major = check.flag("ue8m0", ue8m0), check.flag("column_major_scales", column_major_scales)
        layout_error = _layout_error(mode, ue8m0, column_major, scale_stride)
        if layout_error:
            raise ValueError(layout_error)
        self.ub_on_device = check.flag("ub_on_device", ub_on_device)
        if self.ub_on_device and _ub_error(mode, p.out_dtype):
            raise ValueError(_ub_error(mode, p.out_dtype))
        self.ub_allowed = _ub_error(mode, p.out_dtype) is None
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        self.column_major = column_major
        self.group_stride: int | None = 0
        if mode == "per_group":
            row_stride, self.group_stride, scales = group_scales(hidden // p.group_size, column_major, scale_stride)
        else:
            row_stride, scales = (1, (4, 1, 1)) if mode == "per_token" else (0, (4, 0, 1))
        floor = float(dq_plan.scale_floor(mode, p.out_dtype))
        pdl = use_pdl(device, pdl)
        self.kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        self.launch = launch.RowLaunch(p.signature, p.block, (floor, row_stride, p.group_shift, int(ue8m0), hidden,
                                                              x_stride, o_stride), device, pdl=pdl)
        self.amax_kernel = self.amax_launch = None
        if mode == "per_tensor":
            signature = p.amax_contract.signature
            self.amax_kernel = launch.get_kernel(p.source, p.amax_expression, p.group, signature, device)
            self.amax_launch = launch.RowLaunch(signature, p.block, (floor, hidden, x_stride), device, pdl=pdl)
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        # out (written), input, scales (written), [scale_ub on the device]: what is written disjoint from all
        operands = [(1, o_stride), (dt.itemsize, x_stride), scales] + ([(4, 0, 1)] if self.ub_on_device else [])
        pairs = {(min(i, j), max(i, j)) for i in (0, 2) for j in range(len(operands)) if i != j}
        self.pointers = Pointers(hidden, operands, [(i, j, False) for i, j in sorted(pairs)])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, ub: float, num_tokens, stream) -> bool:
        """pointers: (out, input, scales[, scale_ub pointer]); ub: scale_ub's value (+inf: none, or read from its
        pointer)."""
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_rows and type(ub) is float
                and (ub == math.inf or (self.ub_allowed and check.FLOAT32_TINY <= ub <= check.FLOAT32_MAX))
                and self.pointers.ok(pointers, num_tokens)):
            return False
        group_stride = self.group_stride
        if self.column_major:  # column-major scales: a group stride of at least the rows (None: num_tokens)
            if group_stride is None:
                group_stride = num_tokens
            elif group_stride < num_tokens:
                return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        out, input, scales = pointers[:3]
        amax_launch, amax_kernel = self.amax_launch, self.amax_kernel
        if amax_launch is not None and amax_kernel is not None:  # per tensor: clear the scale, then fold the maxima
            amax_launch(amax_kernel, 1, handle, scales, input, num_tokens, 1)
            amax_launch(amax_kernel, min(num_tokens, dq_plan.MAX_AMAX_BLOCKS), handle, scales, input, num_tokens, 0)
        self.launch(self.kernel, num_tokens, handle, out, scales, input, pointers[3] if self.ub_on_device else 0,
                    ub, group_stride)
        return True


_prepared = PreparedCache(Prepared)


def dynamic_quant(out: Operand, input: Operand, num_tokens: int | None = None, hidden_size: int | None = None, *,
                  scale: Operand, mode: str, out_dtype: DTypeLike | None = None,
                  scale_ub: float | Operand | None = None, group_size: int | None = None, ue8m0: bool = False,
                  column_major_scales: bool = False, scale_stride: int | None = None, dtype: DTypeLike | None = None,
                  input_stride: int | None = None, out_stride: int | None = None, stream: StreamLike = None,
                  pdl: bool = True) -> None:
    """Quantize ``input`` into ``out`` through scales computed from its absolute maxima, and write the scales to
    ``scale``, bit for bit ``pyrms.ops.dynamic_quant.twin.dynamic_quant_twin`` (docs/numerics.md, "Dynamic
    quantizers", gives each formula and where it differs from vLLM's). ``mode``:

    - ``'per_tensor'``: vLLM's ``scaled_fp8_quant(input)``: one scale ``s = amax / qmax`` over the whole tensor
      (at least 2^-126), ``q = saturate(x * (1/s))``. ``scale``: one fp32 (a device pointer, or a float32 array
      of shape () or (1,)). Three launches: the scale cleared, the rows' maxima folded into it, the rows quantized.
    - ``'per_token'``: one scale per row, written to ``scale``: num_tokens contiguous fp32 (a device pointer, or a
      float32 array of shape (num_tokens,) or (num_tokens, 1)). float8: vLLM's ``scaled_fp8_quant(input,
      use_per_token_if_dynamic=True, scale_ub=...)``: ``s = max(min(amax, scale_ub) / qmax, 1/(qmax*512))``,
      ``q = saturate(x / s)``; ``scale_ub``: None, a float > 0, or one fp32 the kernel reads (a device pointer,
      or a one-element float32 array). int8: vLLM's ``scaled_int8_quant(input)`` (symmetric): ``s = amax / 127``,
      ``q = saturate(rint(x * (127 / amax)))``, 0 for an all-zero row; no scale_ub.
    - ``'per_group'``: vLLM's ``per_token_group_quant_fp8``: one scale per ``group_size`` (64 or 128, default
      128; it must divide hidden_size, at most plan.MAX_GROUPS groups) consecutive elements of a row,
      ``s = max(amax, 1e-10) / qmax`` (``ue8m0``: rounded up to a power of two), ``q = saturate(x / s)``.
      ``scale``: the (num_tokens, groups) fp32 scales as ``pyrms.rms_norm_quant``'s per-group mode takes them:
      row-major with row stride ``scale_stride`` (default: the groups), or with ``column_major_scales`` stored
      transposed, group stride ``scale_stride`` (default num_tokens); a pointer or a float32 array.

    Conversions: float8 saturates (±inf too) and writes NaN as the one positive NaN (0x7F, 0x7E); int8 rounds to
    nearest even and saturates, NaN -> 0. NaN is skipped by the maxima (fmaxf).

    ``input``: a device pointer (int) to ``num_tokens`` rows of ``input_stride`` (default hidden_size) elements
    of ``dtype`` (bfloat16, the default, float16 or float32), or an array of [..., hidden_size] rows (num_tokens,
    hidden_size and input_stride default to its). ``out``: a device pointer (int) to rows of ``out_stride``
    (default hidden_size) 1-byte elements, or an 8-bit array as ``pyrms.static_quant``'s ``out`` (its dtype
    names out_dtype). ``out_dtype``: 'float8_e4m3fn' (the default for a raw pointer), 'float8_e5m2' or 'int8', or
    their numpy or torch dtypes. Every pointer at any element alignment; ``out`` and ``scale`` must not overlap
    anything else. ``stream``, ``pdl``: as every pyrms op takes them. Everything is validated before the launch;
    the launches are asynchronous on ``stream``.
    """
    if type(input) is not int or type(out) is not int:
        rows = _quant_arrays.standalone_rows(input, out, dtype, num_tokens, hidden_size, input_stride, out_stride,
                                             out_dtype)
        if rows is None:
            return
        input, input_stride, out, out_stride, out_dtype, dtype, num_tokens, hidden_size = rows
    if type(scale) not in _PLAIN or type(scale_ub) not in _PLAIN:
        scale, scale_ub, scale_stride = _arrays(scale, scale_ub, mode, num_tokens, hidden_size, dtype, out_dtype,
                                                group_size, column_major_scales, scale_stride)
    if out_dtype is None:
        out_dtype = _OUT_DTYPE
    ub: Any  # scale_ub as a float (+inf: none, or read from a pointer), or what was given instead
    pointers: tuple  # (out, input, scale[, scale_ub])
    if type(scale_ub) is int:
        ub, pointers = math.inf, (out, input, scale, scale_ub)
    else:
        ub = math.inf if scale_ub is None else (
            float(scale_ub) if isinstance(scale_ub, numbers.Real) and not isinstance(scale_ub, bool) else scale_ub)
        pointers = (out, input, scale)
    static = (dtype, out_dtype, mode, hidden_size, input_stride, out_stride, len(pointers) == 4, group_size, ue8m0,
              column_major_scales, scale_stride, pdl)
    prepared = _prepared.get(*static)
    if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, ub, num_tokens, stream):
        return
    _explain.explain(_DECLARATION, dict(
        out=out, input=input, scale=scale, scale_ub=pointers[3] if len(pointers) == 4 else None, ub=ub,
        ub_given=scale_ub, mode=mode, grouping=(group_size, ue8m0, column_major_scales, scale_stride),
        num_tokens=num_tokens, hidden_size=hidden_size, dtype=dtype, out_dtype=out_dtype, input_stride=input_stride,
        out_stride=out_stride, stream=stream, pdl=pdl))
    launched = _prepared.require(*static)(pointers, ub, check.size("num_tokens", num_tokens), stream)
    assert launched, "the checks above accept what the prepared launch declines"


def _arrays(scale, scale_ub, mode, num_tokens, hidden_size, dtype, out_dtype, group_size, column_major,
            scale_stride) -> tuple:
    """(scale, scale_ub, scale_stride) of the raw-pointer call for array scales: pointers (and the per-group
    scales' stride), read and checked against the sizes. In an unknown mode an array scale is left as it is: the
    checks after name the mode."""
    if _adapter.is_array(scale_ub):
        scale_ub = _quant_arrays.scalar_array("scale_ub", scale_ub)
    if not _adapter.is_array(scale):
        return scale, scale_ub, scale_stride
    if mode == "per_tensor":
        scale = _quant_arrays.scalar_array("scale", scale, written=True)
    elif mode == "per_token":
        scale = _quant_arrays.token_scales(scale, check.sizes(num_tokens, hidden_size)[0])
    elif mode == "per_group":  # the groups of a valid group_size (the plan's checks, with their messages)
        rows, hidden = check.sizes(num_tokens, hidden_size)
        p = dq_plan.plan_dynamic_quant(_DEFAULT_DTYPE if dtype is None else dtype, hidden,
                                       _OUT_DTYPE if out_dtype is None else out_dtype, mode, group_size)
        scale, scale_stride = _quant_arrays.group_scale_array(
            scale, rows, hidden // p.group_size, check.flag("column_major_scales", column_major), scale_stride)
    return scale, scale_ub, scale_stride


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """dynamic_quant's own checks for the shared explain path (the mode, the dtypes and group size: its plan's;
    the layout options, scale_ub's rules and value), and per call the scales' span and what they must be."""
    mode, (group_size, ue8m0, column_major, scale_stride) = call["mode"], call["grouping"]
    dt = _DEFAULT_DTYPE if call["dtype"] is None else dtypes.get(call["dtype"])
    p = dq_plan.plan_dynamic_quant(dt, hidden, call["out_dtype"], mode, group_size)
    check.flag("ue8m0", ue8m0)
    check.flag("column_major_scales", column_major)
    layout_error = _layout_error(mode, ue8m0, column_major, scale_stride)
    if layout_error:
        raise ValueError(layout_error)
    if call["ub_given"] is not None and _ub_error(mode, p.out_dtype):
        raise ValueError(_ub_error(mode, p.out_dtype))
    check.scale_value("scale_ub", call["ub"], inf_ok=True)
    if mode == "per_tensor":
        span, kind = _explain.ONE, " to one float32, or a float32 array of one element"
    elif mode == "per_token":
        span, kind = _explain.PER_ROW, " to num_tokens float32, or a float32 array of them"
    else:
        span, kind = group_scales_span(hidden // p.group_size, column_major, scale_stride, num_tokens)
    return SimpleNamespace(dtype=dt, out_dtype=p.out_dtype, scales_span=span, scales_kind="a device pointer (int)" + kind)


# out (written), input, the scales (written), and scale_ub where the call reads it from the device: what is
# written disjoint from everything.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("scale", dtypes.FLOAT32, span=_explain.Fact("scales_span"), written=True,
                              kind=_explain.Fact("scales_kind")),
              _explain.Memory("scale_ub", dtypes.FLOAT32, span=_explain.ONE, optional=True)),
    facts=_facts, epsilon=False, strides=("input_stride",), its_elements=True)

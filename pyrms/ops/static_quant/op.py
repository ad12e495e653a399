"""``pyrms.static_quant``: a standalone static fp8/int8 quantizer, vLLM's ``static_scaled_fp8_quant`` (and
its int8 counterpart) on rows (kernel: cuda_src/static_quant.cu; the twin: pyrms.ops.static_quant.twin.static_quant_twin)."""
from __future__ import annotations

import numbers
from typing import Any

from ... import dtypes, launch
from .. import _adapter, _operands as check
from .. import _explain, _placement
from ..._types import DTypeLike, Operand, StreamLike
from .._prepared import Pointers, PreparedCache, use_pdl
from ..rms_norm_quant import arrays as _quant_arrays
from . import plan as static_plan

_OUT_DTYPE = dtypes.FLOAT8_E4M3FN  # where out_dtype is None and out is a raw pointer
_DEFAULT_DTYPE = dtypes.BFLOAT16

# Launch arguments: out, input, scale_ptr, scale (the call's), then the packed tail hidden, input_stride,
# out_stride (the prepared launch's).


class Prepared:
    """One (device, dtype, output dtype, hidden, strides, whether the scale is a device pointer, pdl) of
    static_quant, resolved once. A call checks the pointers, the rows and the scale value; False launches
    nothing and the general path names what is wrong."""

    __slots__ = ("kernel", "launch", "pointers", "max_rows", "placed", "on_device")

    def __init__(self, device, dtype, out_dtype, hidden, input_stride, out_stride, on_device, pdl):
        hidden = check.size("hidden_size", hidden)
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        p = static_plan.plan_static_quant(dt, hidden, out_dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        self.on_device = check.flag("on_device", on_device)
        self.kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        self.launch = launch.RowLaunch(p.signature, p.block, (hidden, x_stride, o_stride), device,
                                       pdl=use_pdl(device, pdl))
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        # out (written), input, [the device scale]: out disjoint from each; input and the scale may share memory
        operands = [(1, o_stride), (dt.itemsize, x_stride)] + ([(4, 0, 1)] if self.on_device else [])
        self.pointers = Pointers(hidden, operands, [(0, j, False) for j in range(1, len(operands))])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, scale: float, num_tokens, stream) -> bool:
        """pointers: (out, input[, scale pointer]); scale: the value (1.0 beside a scale pointer)."""
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_rows and type(scale) is float
                and check.FLOAT32_TINY <= scale <= check.FLOAT32_MAX and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        self.launch(self.kernel, num_tokens, handle, pointers[0], pointers[1],
                    pointers[2] if self.on_device else 0, scale)
        return True


_prepared = PreparedCache(Prepared)


def static_quant(out: Operand, input: Operand, num_tokens: int | None = None, hidden_size: int | None = None, *,
                 scale: float | Operand, out_dtype: DTypeLike | None = None, dtype: DTypeLike | None = None,
                 input_stride: int | None = None, out_stride: int | None = None, stream: StreamLike = None,
                 pdl: bool = True) -> None:
    """Quantize each row of ``input`` into ``out`` with one fp32 scale: vLLM's ``static_scaled_fp8_quant``
    (``out_dtype`` float8) and ``static_scaled_int8_quant`` without an azp (int8), bit for bit
    ``pyrms.ops.static_quant.twin.static_quant_twin``:

    - float8_e4m3fn / float8_e5m2: ``q = saturate(x * (1/scale))``, the reciprocal and the product each one
      correctly rounded fp32 operation (vLLM multiplies by its inverted scale), then round to nearest even;
      ±inf and finite overflow become ±qmax (448, 57344), NaN the one positive NaN (0x7F, 0x7E).
    - int8: ``q = saturate(rint(x / scale))``, the division correctly rounded in fp32, to [-128, 127]; NaN 0.

    ``scale``: a Python float (finite, > 0, within float32), or one fp32 the kernel reads (its value not
    checked, as in vLLM): a device pointer (int) or a float32 array of one element (shape () or (1,)), as
    ``pyrms.rms_norm_quant``'s static mode takes it.

    ``input``: a device pointer (int) to ``num_tokens`` rows of ``input_stride`` (default hidden_size)
    elements of ``dtype`` (bfloat16, the default, float16 or float32), or an array of [..., hidden_size]
    rows (leading dimensions that collapse to one row stride, contiguous along the hidden dimension;
    num_tokens, hidden_size and input_stride default to its). ``out``: a device pointer (int) to rows of
    ``out_stride`` (default hidden_size) 1-byte elements, or an 8-bit array as ``pyrms.rms_norm_quant``'s
    ``out`` (its dtype names out_dtype, which must agree with one given; 1-byte storage that names none
    needs out_dtype). ``out_dtype``: 'float8_e4m3fn' (the default for a raw pointer), 'float8_e5m2' or
    'int8', or their numpy or torch dtypes. Every pointer at any element alignment; ``out`` must not overlap
    ``input`` or a device scale. ``stream``, ``pdl``: as every pyrms op takes them. Everything is validated
    before the launch; the launch is asynchronous on ``stream``.
    """
    if type(input) is not int or type(out) is not int:
        rows = _quant_arrays.standalone_rows(input, out, dtype, num_tokens, hidden_size, input_stride, out_stride,
                                             out_dtype)
        if rows is None:
            return
        input, input_stride, out, out_stride, out_dtype, dtype, num_tokens, hidden_size = rows
    if _adapter.is_array(scale):
        scale = _quant_arrays.scalar_array("scale", scale)
    if out_dtype is None:
        out_dtype = _OUT_DTYPE
    pointers: tuple[Any, ...]  # out, input and a device scale, or out and input
    value: Any  # the scale as a float, or what was given instead (for the explain path to name)
    if type(scale) is int:
        value, pointers = 1.0, (out, input, scale)
    else:
        value = float(scale) if isinstance(scale, numbers.Real) and not isinstance(scale, bool) else scale
        pointers = (out, input)
    static = (dtype, out_dtype, hidden_size, input_stride, out_stride, len(pointers) == 3, pdl)
    prepared = _prepared.get(*static)
    if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, value, num_tokens,
                                                                                     stream):
        return
    _explain.explain(_DECLARATION, dict(out=pointers[0], input=pointers[1], scale=pointers[2] if len(pointers) == 3 else None,
                                        value=value, num_tokens=num_tokens, hidden_size=hidden_size, dtype=dtype,
                                        out_dtype=out_dtype, input_stride=input_stride, out_stride=out_stride,
                                        stream=stream, pdl=pdl))
    launched = _prepared.require(*static)(pointers, value, check.size("num_tokens", num_tokens), stream)
    assert launched, "the checks above accept what the prepared launch declines"


def _facts(call: dict, num_tokens: int, hidden: int) -> static_plan.StaticQuantPlan:
    """static_quant's own checks for the shared explain path: the dtypes (its plan's), the scale's value."""
    p = static_plan.plan_static_quant(_DEFAULT_DTYPE if call["dtype"] is None else call["dtype"], 1, call["out_dtype"])
    check.scale_value("scale", call["value"])
    return p


# out (written), input, and a device scale where the call reads one: out disjoint from each.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("scale", dtypes.FLOAT32, span=_explain.ONE, optional=True)),
    facts=_facts, epsilon=False, strides=("input_stride",), its_elements=True)

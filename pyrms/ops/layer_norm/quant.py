"""``pyrms.layer_norm_quant``: LayerNorm with an fp8 or int8 output through one static scale, FlashInfer's
``layernorm_quant`` (kernel: cuda_src/layer_norm.cu's layer_norm_quant_kernel, LayerNorm's row with a quantizing
store; the twin: pyrms.reference.layer_norm_quant_twin)."""
from __future__ import annotations

import numbers
from types import SimpleNamespace
from typing import Any

from ... import dtypes
from .. import _row_plan as planner
from .. import _adapter, _operands as check
from .. import _explain, _placement
from ..._types import DTypeLike, Operand, OptionalOperand, StreamLike
from .._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl
from ..rms_norm_quant import arrays as _quant_arrays
from . import plan as ln_plan
from .op import _params_dtype

# Launch arguments: out, input, weight, bias, given_ptr, given, epsilon (the call's), then the packed tail hidden,
# input_stride, out_stride (the prepared launch's). Without a weight or a bias, its pointer is 0 (never read).
# Up to this many rows the latency kernel launches (plan.FEW_ROWS; tests.support.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS
_OUT_DTYPE = dtypes.FLOAT8_E4M3FN  # where out_dtype is None and out is a raw pointer


class Prepared:
    """One (device, dtype, output dtype, hidden, strides, weight and bias present and their dtype, round_input,
    whether the scale is a device pointer, pdl) of layer_norm_quant, resolved once. A call checks the pointers,
    rows, epsilon and the scale value; False launches nothing and the general path names what is wrong."""

    __slots__ = ("rows", "max_rows", "pointers", "placed", "has_weight", "has_bias", "on_device")

    def __init__(self, device, dtype, out_dtype, hidden, input_stride, out_stride, has_weight, has_bias, weight_dtype,
                 round_input, on_device, pdl):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        if not has_weight:
            check.no_weight(weight_dtype)
        p = ln_plan.plan_layer_norm_quant(dt, hidden, out_dtype, bias=has_bias, weight=has_weight,
                                          weight_dtype=weight_dtype, round_input=check.flag("round_input", round_input))
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        self.on_device = check.flag("on_device", on_device)
        self.rows = RowLaunches(p, (hidden, x_stride, o_stride), device, use_pdl(device, pdl), (x_stride, o_stride))
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        self.has_weight, self.has_bias = has_weight, has_bias
        # In call order: out (written: disjoint from the rest), input, [weight], [bias], [the device scale]; what
        # is only read may share memory.
        vectors = [(p.param_dtype.itemsize, 0)] * (int(has_weight) + int(has_bias))
        operands = [(1, o_stride), (dt.itemsize, x_stride), *vectors, *([(4, 0, 1)] if self.on_device else [])]
        self.pointers = Pointers(hidden, operands, [(0, j, False) for j in range(1, len(operands))])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, given: float, epsilon, num_tokens, stream) -> bool:
        """pointers: (out, input, [weight,] [bias,] [scale pointer]); given: the scale (1.0 beside a pointer)."""
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and type(given) is float
                and check.FLOAT32_TINY <= given <= check.FLOAT32_MAX and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        out, x, rest = pointers[0], pointers[1], pointers[2:]
        w = rest[0] if self.has_weight else 0
        b = rest[int(self.has_weight)] if self.has_bias else 0
        given_ptr = rest[-1] if self.on_device else 0
        self.rows(_FEW_ROWS, num_tokens, handle, out | x | w | b, out, x, w, b, given_ptr, given, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def layer_norm_quant(out: Operand, input: Operand, weight: OptionalOperand, bias: OptionalOperand, epsilon: float,
                     num_tokens: int | None = None, hidden_size: int | None = None, *, scale: float | Operand,
                     out_dtype: DTypeLike | None = None, dtype: DTypeLike | None = None,
                     input_stride: int | None = None, out_stride: int | None = None, stream: StreamLike = None,
                     round_input: bool = False, pdl: bool = True, weight_dtype: DTypeLike | None = None) -> None:
    """LayerNorm of each row of ``input`` quantized into ``out`` through one static scale: FlashInfer's
    ``layernorm_quant(out, input, gemma, beta, scale, eps)``, ``out = (((x - E[x]) / sqrt(Var[x] + epsilon)) *
    weight + bias) / scale`` saturated to ``out_dtype`` ('float8_e4m3fn', 'float8_e5m2' or 'int8', or their numpy
    or torch dtypes; None, the default: out's own dtype where out is an array that names one, else
    'float8_e4m3fn'). The formulas: docs/numerics.md, "Quantized outputs".

    ``v = ((x - mean) * inv) * weight + bias`` in fp32, ``layer_norm``'s statistics and expression bit for bit;
    ``round_input=True`` quantizes ``v`` rounded to the input's dtype instead, ``layer_norm``'s output, which is
    what FlashInfer's kernel quantizes. Then float8: ``q = saturate(v * (1/scale))`` (the reciprocal an fp32
    division, as FlashInfer and vLLM multiply by it), int8: ``q = saturate(rint(v / scale))``; NaN stays NaN in
    float8 (0 in int8). ``scale``: a Python float (finite, > 0, within float32), or one fp32 that the kernel
    reads (its value not checked, as FlashInfer's scale tensor): a device pointer (int), or a float32 array of
    one element (shape () or (1,)).

    ``weight=None``: no weight (``w = 1``); ``bias=None``: no bias term. ``weight`` and ``bias`` of the input's
    dtype or, beside bfloat16/float16 rows, both float32 (FlashInfer's fp32 gamma and beta; float32 arrays, or
    ``weight_dtype='float32'`` for raw pointers). ``out``: a device pointer (int) to rows of ``out_stride``
    (default hidden_size) 1-byte elements at any address, or a quantized array as ``pyrms.rms_norm_quant``'s
    ``out``, never the input; ``input``: raw pointers or arrays, as every pyrms op takes them. ``epsilon``,
    ``dtype``, strides, ``stream``, ``pdl``: as every pyrms op takes them. Everything is validated before the
    launch, which is asynchronous on ``stream``.
    """
    weight_dtype_given = weight_dtype
    if not (type(input) is int and (weight is None or type(weight) is int) and (bias is None or type(bias) is int)):
        vectors = ([] if weight is None else [("weight", weight)]) + ([] if bias is None else [("bias", bias)])
        dt, num_tokens, hidden_size, found = check.arrays(
            dtype, num_tokens, hidden_size, rows=[("input", input, input_stride, "input_stride", False)],
            vectors=vectors, mixed=("weight", "bias"))
        if num_tokens == 0:
            return
        weight_dtype_given = _params_dtype(dt, weight_dtype, found)
        input, input_stride = found["input"]
        weight = None if weight is None else found["weight"][0]
        bias = None if bias is None else found["bias"][0]
        dtype = dt
    if type(out) is not int:
        out, out_stride, out_dtype, num_tokens, hidden_size = _quant_arrays.quantized_out(
            out, out_stride, out_dtype, num_tokens, hidden_size)
        if num_tokens == 0:
            return
    if _adapter.is_array(scale):
        scale = _quant_arrays.scalar_array("scale", scale)
    if out_dtype is None:
        out_dtype = _OUT_DTYPE
    given: Any  # the scale as a float (1.0 beside a device scale), or what was given instead, for the errors to name
    if type(scale) is int:
        given, scale_ptr = 1.0, scale
    else:
        given = float(scale) if isinstance(scale, numbers.Real) and not isinstance(scale, bool) else scale
        scale_ptr = None
    pointers = (out, input, *(() if weight is None else (weight,)), *(() if bias is None else (bias,)),
                *(() if scale_ptr is None else (scale_ptr,)))
    static = (dtype, out_dtype, hidden_size, input_stride, out_stride, weight is not None, bias is not None,
              weight_dtype_given, round_input, scale_ptr is not None, pdl)
    prepared = _prepared.get(*static)
    if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, given, epsilon,
                                                                                     num_tokens, stream):
        return
    _explain.explain(_DECLARATION, dict(
        out=out, input=input, weight=weight, bias=bias, scale=scale_ptr, given=given, epsilon=epsilon,
        num_tokens=num_tokens, hidden_size=hidden_size, dtype=dtype, out_dtype=out_dtype, weight_dtype=weight_dtype_given,
        input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl, round_input=round_input))
    launched = _prepared.require(*static)(pointers, given, float(epsilon), int(num_tokens), stream)
    assert launched, "the checks above accept what the prepared launch declines"


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """layer_norm_quant's own checks for the shared explain path (no weight_dtype without a weight, the dtypes its
    plan takes, the scale's value), and per call the output's and the weight and bias's dtypes."""
    if call["weight"] is None:
        check.no_weight(call["weight_dtype"])
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    p = ln_plan.plan_layer_norm_quant(dt, 1, call["out_dtype"], weight=call["weight"] is not None,
                                      weight_dtype=call["weight_dtype"], bias=call["bias"] is not None)
    check.scale_value("scale", call["given"])
    return SimpleNamespace(dtype=dt, out_dtype=p.out_dtype, param_dtype=p.param_dtype)


# out (written: disjoint from every other operand), input, the weight and bias of one dtype (the input's, or
# float32 beside 2-byte rows), and a device scale where the call reads one.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("weight", _explain.Fact("param_dtype"), optional=True),
              _explain.Memory("bias", _explain.Fact("param_dtype"), optional=True),
              _explain.Memory("scale", dtypes.FLOAT32, span=_explain.ONE, optional=True)),
    facts=_facts, flags=("pdl", "round_input"), strides=("input_stride", "out_stride"), its_elements=True)

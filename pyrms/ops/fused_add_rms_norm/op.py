"""``pyrms.fused_add_rms_norm``: residual add + RMSNorm in place (kernel: cuda_src/fused_add_rms_norm.cu)."""
from __future__ import annotations

from types import SimpleNamespace

from ... import driver, dtypes
from .. import _row_plan as planner
from .. import _operands as check
from .. import _explain, _placement
from ..._types import DTypeLike, Operand, OptionalOperand, StreamLike
from .._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl
from . import plan as fused_plan

# Up to this many rows the latency kernel launches (plan.FEW_ROWS; tests.support.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, strides, options) of fused_add_rms_norm, resolved once; with an fp32
    output (out_dtype), the out-of-place kernel, whose `out` a call passes last."""

    __slots__ = ("rows", "max_rows", "pointers", "weightless", "placed", "has_out")

    def __init__(self, device, dtype, hidden, input_stride, residual_stride, gemma, round_once, pdl, weight_dtype=None,
                 sum_precision=None, residual_dtype=None, out_dtype=None, out_stride=None):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        r_stride = check.stride_arg("residual_stride", residual_stride, hidden)
        p = fused_plan.plan_fused_add_rms_norm(dt, hidden, gemma=bool(gemma), round_once=bool(round_once),
                                            weight_dtype=weight_dtype, sum_precision=sum_precision,
                                            residual_dtype=residual_dtype, out_dtype=out_dtype)
        self.has_out = p.out != "same"
        if not self.has_out and out_stride is not None:
            raise ValueError("out_stride was given without an out of its own (out_dtype); leave it out")
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        # fused_add_rms_norm_out_kernel: out first, its row stride last
        tail = (hidden, x_stride, r_stride, o_stride) if self.has_out else (hidden, x_stride, r_stride)
        self.rows = RowLaunches(p, tail, device, use_pdl(device, pdl),
                                (x_stride, r_stride, o_stride) if self.has_out else (x_stride, r_stride))
        self.max_rows = check.max_rows(hidden, x_stride, r_stride, *((o_stride,) if self.has_out else ()))
        # input and residual are both written: disjoint from each other and the weight
        self.weightless = p.weight == "none"  # then the weight pointer is null and never read
        weight = [] if self.weightless else [(p.weight_itemsize, 0)]
        operands = [(dt.itemsize, x_stride), (p.residual_dtype.itemsize, r_stride), *weight]
        pairs = [(0, 1, False)] + ([] if self.weightless else [(0, 2, False), (1, 2, False)])
        if self.has_out:  # last: written, disjoint from everything else
            pairs += [(len(operands), k, False) for k in range(len(operands))]
            operands.append((p.out_dtype.itemsize, o_stride))
        self.pointers = Pointers(hidden, operands, pairs)
        self.placed = _placement.for_device(device)  # None with one device: nothing to check per call

    def __call__(self, input, residual, weight, epsilon, num_tokens, stream, out=0) -> bool:
        pointers = (input, residual) if self.weightless else (input, residual, weight)
        if self.has_out:
            pointers += (out,)
        elif out:
            return False
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        if self.has_out:
            self.rows(_FEW_ROWS, num_tokens, handle, out | input | residual | weight, out, input, residual, weight,
                      epsilon)
        else:
            self.rows(_FEW_ROWS, num_tokens, handle, input | residual | weight, input, residual, weight, epsilon)
        return True


_prepared = PreparedCache(Prepared)
_last = _prepared.last  # the last call on raw pointers, bound when it repeats


def fused_add_rms_norm(input: Operand, residual: Operand, weight: OptionalOperand, epsilon: float,
                       num_tokens: int | None = None, hidden_size: int | None = None, *, dtype: DTypeLike | None = None,
                       input_stride: int | None = None, residual_stride: int | None = None, stream: StreamLike = None,
                       gemma: bool = False, round_once: bool = False, pdl: bool = True,
                       weight_dtype: DTypeLike | None = None, sum_precision: str | None = None,
                       residual_dtype: DTypeLike | None = None, out: OptionalOperand = None,
                       out_dtype: DTypeLike | None = None, out_stride: int | None = None) -> OptionalOperand:
    """vLLM's fused_add_rms_norm, in place on ``num_tokens`` rows of ``hidden_size`` elements:
    ``residual <- input + residual`` (added in fp32, rounded once to the dtype), then
    ``input <- RMSNorm(residual, weight)`` of that rounded sum, bit for bit what pyrms's plain RMSNorm
    forward would compute from the new residual (same ``gemma`` and ``round_once`` options).

    ``sum_precision``: what is normalized. ``"rounded"`` (the default), as above: vLLM's.
    ``"fp32"``: the fp32 sum ``s = input + residual``, never rounded before it is normalized, while the
    residual still stores it rounded to the dtype: FlashInfer's and SGLang's ``fused_add_rmsnorm``
    (which also round once: ``round_once=True``). A float32 ``residual_dtype`` (raw pointers; an array
    gives its own) beside bf16 or fp16 rows: an fp32 residual stream (QuACK's, Transformer Engine's),
    which stores ``s`` exactly; its sum precision is "fp32" (None picks it; "rounded" is an error).
    With float32 rows both precisions are the same computation. docs/numerics.md has the formulas.

    ``input``, ``residual``, ``weight``: raw device pointers (int) or arrays, as every pyrms op takes them
    ([..., hidden_size], weight [hidden_size]; sizes then inferred), any element alignment of each
    pointer. ``input`` and ``residual`` must be disjoint, each with its own row stride
    (``input_stride``/``residual_stride``, >= hidden_size; default: the array's, or hidden_size).
    ``dtype``, ``stream``, ``epsilon``, ``pdl``, ``weight=None`` (no weight) and an fp32 weight
    (``weight_dtype``): as in the plain RMSNorm forward.

    ``out_dtype='float32'`` (bfloat16 or float16 rows): the normalized rows are written to ``out``, an fp32
    [..., hidden_size] of its own (row stride ``out_stride``), not over ``input``, which is then only read;
    the residual is updated in its dtype as above. ``out`` holds what the plain forward's fp32 output would (its
    rounding to the rows' dtype is the in-place result, bit for bit). Returns ``out`` (a new pyrms.Tensor
    for arrays given ``out=None``), or None in place. ``out`` must be disjoint from every other operand.
    An fp32 out is offered with the rounded sum only: ``sum_precision='fp32'`` (or a float32 residual) with
    ``out_dtype='float32'`` is a ValueError naming both (its kernel writes the normalized row over input).

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument. The launch is asynchronous on ``stream``.
    """
    if type(input) is int and type(residual) is int and (type(weight) is int or weight is None) and (
            out is None or type(out) is int):
        # The last call, bound when it repeats (_prepared.LastCall), first: its key is the arguments as given, the
        # thread's device (driver._selected: private to pyrms, read through the package on purpose) and the few-row
        # threshold. Static arguments compare as the prepared launches' keys do.
        key = (input, residual, weight, epsilon, num_tokens, stream, out, dtype, hidden_size, input_stride,
               residual_stride, gemma, round_once, pdl, weight_dtype, sum_precision, residual_dtype, out_dtype,
               out_stride, driver._selected.device, _FEW_ROWS)  # type: ignore[attr-defined]
        last = _last.pair
        repeated = last[0] == key and type(epsilon) is float and type(num_tokens) is int and (
            stream is None or type(stream) is int)  # values the per-call checks take of their own types only
        if repeated and last[1] is not None:
            last[1]()
            return out
        if not repeated:
            _last.pair = (key, None)
        if weight is None:  # no weight: its own kernel (W = void), a null pointer never read
            weight, weight_dtype = 0, check.no_weight(weight_dtype)
        static = (dtype, hidden_size, input_stride, residual_stride, gemma, round_once, pdl, weight_dtype,
                  sum_precision, residual_dtype, out_dtype, out_stride)
        prepared = _prepared.get(*static)
        if prepared is not None and prepared(input, residual, weight, epsilon, num_tokens, stream, out or 0):
            if repeated:  # the same call twice in a row: bound for the next ones
                _last.bind(key, prepared, input, residual, weight, epsilon, num_tokens, stream, out or 0)
            return out
        _explain.explain(_DECLARATION, dict(
            input=input, residual=residual, weight=weight, out=out, epsilon=epsilon, num_tokens=num_tokens,
            hidden_size=hidden_size, dtype=dtype, input_stride=input_stride, residual_stride=residual_stride,
            out_stride=out_stride, stream=stream, pdl=pdl, gemma=gemma, weight_dtype=weight_dtype,
            sum_precision=sum_precision, residual_dtype=residual_dtype, out_dtype=out_dtype))
        launched = _prepared.require(*static)(input, residual, weight, float(epsilon),
                                              check.size("num_tokens", num_tokens), stream, out)
        assert launched, "the checks above accept what the prepared launch declines"
        return out
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("input", input, input_stride, "input_stride", True),
                                                 ("residual", residual, residual_stride, "residual_stride", True),
                                                 ("out", out, out_stride, "out_stride", True)],
                                           vectors=[] if weight is None else [("weight", weight)],
                                           mixed=("weight", "residual"), mixed_out="out")
    o = o_stride = None
    if out is None and out_dtype is not None and dtypes.get(out_dtype) is not dt:  # the allocating form
        out = check.allocate_like(input, dtypes.get(out_dtype), max(rows, 1), hidden)
        found["out"] = (out.ptr, hidden, dtypes.get(out_dtype))
    if "out" in found:
        o, o_stride, o_dtype = found["out"]
        out_dtype = check.out_dtype_operand(o_dtype, out_dtype)
    if rows:
        (x, x_stride), (r, r_stride, r_dtype) = found["input"], found["residual"]
        w, weight_dtype = check.weight_operand(found.get("weight"), weight_dtype)
        if r_dtype is not None:  # an array's dtype is the residual's
            if residual_dtype is not None and dtypes.get(residual_dtype) is not r_dtype:
                raise ValueError(f"residual has dtype {r_dtype.name}, but residual_dtype is "
                                 f"{dtypes.get(residual_dtype).name}")
            residual_dtype = r_dtype
        fused_add_rms_norm(x, r, w, epsilon, rows, hidden, dtype=dt, input_stride=x_stride, residual_stride=r_stride,
                           stream=stream, gemma=gemma, round_once=round_once, pdl=pdl, weight_dtype=weight_dtype,
                           sum_precision=sum_precision, residual_dtype=residual_dtype,
                           out=o, out_dtype=out_dtype, out_stride=o_stride)
    return out


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """fused_add_rms_norm's own checks for the shared explain path (its plan's; an out given where it takes none,
    or missing where it needs one), and per call the operands' dtypes (out: only where it has one of its own)."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    p = fused_plan.plan_fused_add_rms_norm(dt, 1, gemma=bool(call["gemma"]), weight_dtype=call["weight_dtype"],
                                           sum_precision=call["sum_precision"], residual_dtype=call["residual_dtype"],
                                           out_dtype=call["out_dtype"])
    out = call["out"]
    if p.out == "same" and (out is not None or call["out_stride"] is not None):
        raise ValueError(f"out (and out_stride) take an output of another dtype than input's {dt.name} (out_dtype="
                         f"'float32'); the output of input's dtype is written over input (in place)")
    if p.out != "same" and out is None:
        raise TypeError(f"out_dtype={p.out_dtype.name} needs out, a device pointer or array of its own for the output")
    # out, where there is one, is of another dtype than input: never in place (a dtype check names out=input)
    return SimpleNamespace(dtype=dt, out=None if p.out == "same" else p.out_dtype, residual_dtype=p.residual_dtype,
                           weight_dtype=p.weight_dtype, in_place=False)


# out (an fp32 output of its own), input and residual are written: disjoint from each other and the weight.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride", written=True),
              _explain.Memory("residual", _explain.Fact("residual_dtype"), stride="residual_stride", written=True),
              _explain.Memory("weight", _explain.Fact("weight_dtype"))),
    facts=_facts, in_place=(("out", "input"),), in_place_when=_explain.Fact("in_place"),
    strides=("input_stride", "residual_stride", "out_stride"))

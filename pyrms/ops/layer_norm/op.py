"""``pyrms.layer_norm`` and ``pyrms.layer_norm_backward`` (kernels: cuda_src/layer_norm.cu, cuda_src/layer_norm_backward.cu)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, overload

from ... import driver, dtypes
from .. import _row_plan as planner
from .. import _operands as check
from .. import _explain, _placement
from .._norm_backward.prepared import norm_backward
from ..._types import Array, ArrayT, DTypeLike, OptionalOperand, Operand, OperandT, StreamLike, Workspace
from ...tensor import Tensor
from .. import _convention
from .._convention import UNSET, Form
from .._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl
from . import plan as ln_plan

# Up to this many rows the latency kernel launches (plan.FEW_ROWS; tests.support.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, strides, bias or not, weight and output dtypes) of layer_norm, resolved once."""

    __slots__ = ("rows", "max_rows", "pointers", "stats_pointers", "placed", "has_weight", "rms")

    def __init__(self, device, dtype, hidden, input_stride, out_stride, has_bias, pdl, has_weight=True,
                 weight_dtype=None, out_dtype=None, rms=False):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        if not has_weight:
            check.no_weight(weight_dtype)
        p = ln_plan.plan_layer_norm(dt, hidden, bias=has_bias, weight=has_weight, weight_dtype=weight_dtype,
                                    out_dtype=out_dtype, rms=check.flag("rms", rms))
        self.rows = RowLaunches(p, (hidden, x_stride, o_stride), device, use_pdl(device, pdl),
                                (x_stride, o_stride))
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        # out: in place over input allowed (one dtype only), disjoint from the weight and bias, which share
        # one dtype (the input's without a weight)
        self.has_weight = has_weight  # without one, the weight pointer is null and never read
        vectors = [(p.param_dtype.itemsize, 0)] * (int(has_weight) + int(has_bias))
        operands = [(p.out_dtype.itemsize, o_stride), (dt.itemsize, x_stride), *vectors]
        pairs = [(0, 1, p.out == "same"), *((0, 2 + k, False) for k in range(len(vectors)))]
        self.pointers = Pointers(hidden, operands, pairs)
        # The statistics saved for the backward, last (LayerNorm's mean, then rstd; RMSNorm-with-a-bias's rstd):
        # one float32 per row each, written, disjoint from every other operand.
        self.rms = p.rms
        stats = range(len(operands), len(operands) + (1 if p.rms else 2))
        self.stats_pointers = Pointers(hidden, [*operands, *[(4, 1, 1)] * len(stats)],
                                       [*pairs, *((j, k, False) for j in stats for k in range(j))])
        self.placed = _placement.for_device(device)

    def __call__(self, out, input, weight, bias, epsilon, num_tokens, stream, mean=0, rstd=0) -> bool:
        """Launch, or return False having launched nothing; mean, rstd: 0, or where each row's mean and inv go
        (float32; LayerNorm's both, RMSNorm-with-a-bias's rstd alone)."""
        if not scalars_ok(epsilon, num_tokens, self.max_rows):
            return False
        pointers = (out, input, *((weight,) if self.has_weight else ()), *(() if bias is None else (bias,)))
        checked = self.pointers
        if mean or rstd:
            if not (rstd and (not mean if self.rms else mean)):  # LayerNorm's two go together; RMS has no mean
                return False
            checked, pointers = self.stats_pointers, (*pointers, *((rstd,) if self.rms else (mean, rstd)))
        if not checked.ok(pointers, num_tokens):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        w, b = weight or 0, bias or 0
        self.rows(_FEW_ROWS, num_tokens, handle, out | input | w | b, out, input, w, b, mean, rstd, epsilon)
        return True


_prepared = PreparedCache(Prepared)
_last = _prepared.last  # the last call on raw pointers, bound when it repeats
_FORM = Form("layer_norm", ("input", "weight", "bias"), 2, 1e-5)


@overload
def layer_norm(input: Array, weight: Array | None, bias: Array | None = None, eps: float = ..., *, out: None = None,
               dtype: DTypeLike | None = None, stream: StreamLike = None, pdl: bool = True,
               out_dtype: DTypeLike | None = None, rms: bool = False, mean: Operand | None = None,
               rstd: Operand | None = None) -> Tensor: ...
@overload
def layer_norm(input: Array, weight: Array | None, bias: Array | None = None, eps: float = ..., *, out: ArrayT,
               dtype: DTypeLike | None = None, stream: StreamLike = None, pdl: bool = True,
               out_dtype: DTypeLike | None = None, rms: bool = False, mean: Operand | None = None,
               rstd: Operand | None = None) -> ArrayT: ...
@overload
def layer_norm(out: None, input: Array, weight: Operand | None, bias: Operand | None, /, epsilon: float,
               num_tokens: int | None = None, hidden_size: int | None = None, *, dtype: DTypeLike | None = None,
               input_stride: int | None = None, out_stride: int | None = None, stream: StreamLike = None,
               pdl: bool = True, weight_dtype: DTypeLike | None = None,
               out_dtype: DTypeLike | None = None, rms: bool = False, mean: Operand | None = None,
               rstd: Operand | None = None) -> Tensor: ...
@overload
def layer_norm(out: OperandT, input: Operand, weight: Operand | None, bias: Operand | None, /, epsilon: float,
               num_tokens: int | None = None, hidden_size: int | None = None, *, dtype: DTypeLike | None = None,
               input_stride: int | None = None, out_stride: int | None = None, stream: StreamLike = None,
               pdl: bool = True, weight_dtype: DTypeLike | None = None,
               out_dtype: DTypeLike | None = None, rms: bool = False, mean: Operand | None = None,
               rstd: Operand | None = None) -> OperandT: ...
def layer_norm(input: Any, weight: Any = UNSET, bias: Any = UNSET, eps: Any = UNSET, epsilon: Any = UNSET,
               num_tokens: Any = None, hidden_size: Any = None, *, out: Any = UNSET, dtype: Any = None,
               input_stride: Any = None, out_stride: Any = None, stream: Any = None, pdl: Any = True,
               weight_dtype: Any = None, out_dtype: Any = None, rms: Any = False, mean: Any = None,
               rstd: Any = None) -> Any:
    """LayerNorm of each of ``num_tokens`` rows of ``hidden_size`` elements, written to ``out``:
    ``out = (x - mean) / sqrt(var + epsilon) * weight + bias``, var the population variance;
    ``bias=None`` for a LayerNorm without bias (no term added, as ``torch.nn.LayerNorm(bias=False)``);
    ``weight=None`` without a weight (``elementwise_affine=False`` when bias is None too).
    Returns ``out`` (a new pyrms.Tensor when ``out`` is None). Called in either convention: input first on
    arrays (``y = layer_norm(x, weight, bias)``, ``layer_norm(x, weight, eps=1e-5, out=y)``; bias defaults to
    None and eps to 1e-5, as in ``pyrms.torch.layer_norm``), or out first, vLLM's order, on raw device pointers
    or arrays (``layer_norm(out, input, weight, bias, epsilon, num_tokens, hidden_size)``, positionally or every
    operand by name); a call that gives ``epsilon`` is out first.

    Statistics in fp32 in two passes (the mean, then the squared deviations from it, over values held
    in registers: no E[x^2] - mean^2 cancellation); the whole expression in fp32, rounded once to the
    dtype. A row's result does not depend on the batch it sits in.

    ``rms=True``: RMSNorm with a bias, ``out = x / sqrt(mean(x^2) + epsilon) * weight + bias`` (QuACK's
    ``rmsnorm(x, weight, bias)``): the RMSNorm forward's statistics, bit for bit, nothing subtracted, the
    expression rounded once (that forward's rounding with ``round_once=True``, to which it adds the bias).
    The bias is required then; everything else is as for LayerNorm. Its backward is
    ``pyrms.rms_norm_backward`` with ``grad_bias``.

    Mixed dtypes (bfloat16 or float16 rows): ``weight`` and ``bias`` both float32 (FlashInfer's and vLLM's
    fp32 gamma and beta; float32 arrays, or ``weight_dtype='float32'`` for raw pointers), read exactly;
    ``out`` float32 (a float32 array, or ``out_dtype='float32'``): the fp32 expression stored unrounded, so
    its rounding to the rows' dtype is their output bit for bit. Not in place when out's dtype differs.

    ``out``, ``input``: [..., hidden_size]; ``weight``, ``bias``: [hidden_size]; raw device pointers
    (int) or arrays, as every pyrms op takes them (sizes then inferred), contiguous along the hidden
    dimension, any element alignment. ``out`` may be ``input`` (in place). ``dtype``, strides,
    ``stream``, ``epsilon``, ``pdl``: as every pyrms op takes them. Everything is validated before the launch,
    which is asynchronous on ``stream``.

    ``mean``, ``rstd``: where each row's mean and ``1 / sqrt(var + epsilon)`` are stored (float32, one per row:
    raw pointers or arrays of num_tokens, disjoint from the rest), both or neither, for ``layer_norm_backward``
    to read instead of recomputing them (the same values: the same bits); with ``rms=True``, ``rstd`` alone
    (RMSNorm's inv_rms, for its backward's ``rstd=``). The output does not change.
    """
    # The overloads above are its types. Out first on raw pointers, positionally, is the hot path: input, weight,
    # bias and eps hold out, input, the weight and the bias (_convention says why).
    if mean is None and rstd is None and type(input) is int and type(weight) is int and (
            bias is None or type(bias) is int) and (eps is None or type(eps) is int) and out is UNSET:
        # The last call, bound when it repeats (_prepared.LastCall), first: its key is the arguments as given, the
        # thread's device (driver._selected: private to pyrms, read through the package on purpose) and the few-row
        # threshold. Static arguments compare as the prepared launches' keys do.
        key = (input, weight, bias, eps, epsilon, num_tokens, stream, dtype, hidden_size, input_stride, out_stride, pdl,
               weight_dtype, out_dtype, rms, driver._selected.device, _FEW_ROWS)  # type: ignore[attr-defined]
        last = _last.pair
        repeated = last[0] == key and type(epsilon) is float and type(num_tokens) is int and (
            stream is None or type(stream) is int)  # values the per-call checks take of their own types only
        if repeated and last[1] is not None:
            last[1]()
            return input
        if not repeated:
            _last.pair = (key, None)
        static = (dtype, hidden_size, input_stride, out_stride, eps is not None, pdl, bias is not None, weight_dtype,
                  out_dtype, rms)
        prepared = _prepared.get(*static)
        if prepared is not None and prepared(input, weight, bias, eps, epsilon, num_tokens, stream):
            if repeated:  # the same call twice in a row: bound for the next ones
                _last.bind(key, prepared, input, weight, bias, eps, epsilon, num_tokens, stream)
            return input
        if epsilon is UNSET:  # raw pointers input first (the prepared launch declines a missing epsilon): explained
            _convention.resolve(_FORM, (input, weight, bias), eps, epsilon, out)
        out, input, weight, bias = input, weight, bias, eps
        _explain_call(out, input, weight, bias, epsilon, num_tokens, hidden_size, None, None, dtype=dtype,
                      input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl, weight_dtype=weight_dtype,
                      out_dtype=out_dtype, rms=rms)
        launched = _prepared.require(*static)(out, input, weight, bias, float(epsilon), int(num_tokens), stream)
        assert launched, "the checks above accept what the prepared launch declines"
        return out
    out, input, weight, bias, epsilon = _convention.resolve(_FORM, (input, weight, bias), eps, epsilon, out)
    if type(out) is int and type(input) is int and (weight is None or type(weight) is int) and (
            bias is None or type(bias) is int):  # out first by name
        if mean is not None or rstd is not None:  # the statistics saved for the backward
            return _with_stats(out, input, weight, bias, epsilon, num_tokens, hidden_size, mean, rstd, dtype=dtype,
                               input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl,
                               weight_dtype=weight_dtype, out_dtype=out_dtype, rms=rms)
        return layer_norm(out, input, weight, bias, epsilon, num_tokens, hidden_size, dtype=dtype,
                          input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl,
                          weight_dtype=weight_dtype, out_dtype=out_dtype, rms=rms)
    vectors = ([] if weight is None else [("weight", weight)]) + ([] if bias is None else [("bias", bias)])
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("input", input, input_stride, "input_stride", False),
                                                 ("out", out, out_stride, "out_stride", True)], vectors=vectors,
                                           mixed=("weight", "bias"), mixed_out="out")
    if out is None:
        odt = dt if out_dtype is None else dtypes.get(out_dtype)
        out = check.allocate_like(input, odt, max(rows, 1), hidden)
        found["out"] = (out.ptr, hidden, odt)
    (o, o_stride, o_dtype) = found["out"]
    out_dtype = check.out_dtype_operand(o_dtype, out_dtype)
    weight_dtype = _params_dtype(dt, weight_dtype, found)
    if rows:
        x, x_stride = found["input"]
        stats = {name: value if type(value) is int else check.float32_per_row(name, value, rows, f"{name}'s values",
                                                                             written=True)
                 for name, value in (("mean", mean), ("rstd", rstd)) if value is not None}
        layer_norm(o, x, None if weight is None else found["weight"][0], None if bias is None else found["bias"][0],
                   epsilon, rows, hidden, dtype=dt, input_stride=x_stride, out_stride=o_stride, stream=stream, pdl=pdl,
                   weight_dtype=weight_dtype, out_dtype=out_dtype, rms=rms, **stats)
    return out


def _with_stats(out, input, weight, bias, epsilon, num_tokens, hidden_size, mean, rstd, *, dtype, input_stride,
                out_stride, stream, pdl, weight_dtype, out_dtype, rms) -> OptionalOperand:
    """layer_norm on raw pointers (layer_norm reads arrays first) storing each row's statistics: mean and rstd
    (LayerNorm's, together) or rstd alone (rms), checked (float32, one per row, disjoint from each other and the
    rest), then the prepared launch."""
    if rms and mean is not None:
        raise ValueError("mean was given with rms=True: RMSNorm with a bias subtracts no mean; it saves rstd alone")
    if not rms and (mean is None) != (rstd is None):
        given, missing = ("mean", "rstd") if rstd is None else ("rstd", "mean")
        raise ValueError(f"{given} was given without {missing}: LayerNorm's backward reads both (pass both, or "
                         "neither)")
    rows, hidden = check.sizes(num_tokens, hidden_size)
    stats = {name: value if type(value) is int else check.float32_per_row(name, value, rows, f"{name}'s values",
                                                                         written=True)
             for name, value in (("mean", mean), ("rstd", rstd)) if value is not None}
    prepared = _prepared.get(dtype, hidden_size, input_stride, out_stride, bias is not None, pdl, weight is not None,
                             weight_dtype, out_dtype, rms)
    if prepared is not None and prepared(out, input, weight, bias, epsilon, num_tokens, stream, stats.get("mean", 0),
                                         stats["rstd"]):
        return out
    _explain_call(out, input, weight, bias, epsilon, num_tokens, hidden_size, stats.get("mean"), stats["rstd"],
                  dtype=dtype, input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl,
                  weight_dtype=weight_dtype, out_dtype=out_dtype, rms=rms)
    raise AssertionError("unreachable: layer_norm's statistics passed every check the prepared launch makes")


def _params_dtype(dt: dtypes.DType, weight_dtype, found: dict):
    """weight_dtype of the raw-pointer call from the weight and bias arrays' dtypes (check.arrays' mixed
    entries: None for a raw pointer): weight_dtype if given, else the weight's, else the bias's; gamma and
    beta share it (the bias is of the input's dtype without a weight)."""
    has_weight = "weight" in found
    want = dtypes.get(weight_dtype) if weight_dtype is not None else None
    for name in ("weight", "bias"):
        array_dtype = found[name][2] if name in found else None
        if array_dtype is None:
            continue
        if want is None:
            want = array_dtype if has_weight else dt
        if array_dtype is not want:
            whose = "the weight's and bias's dtype" if has_weight else "the input's (a bias without a weight)"
            raise ValueError(f"{name} has dtype {array_dtype.name}, but {whose} is {want.name}")
    return want if has_weight else None


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """layer_norm's own checks for the shared explain path (no weight_dtype without a weight, its plan's), and per
    call the dtypes, and whether out may be input (of the input's dtype)."""
    if call["weight"] is None:
        check.no_weight(call["weight_dtype"])
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    p = ln_plan.plan_layer_norm(dt, 1, weight=call["weight"] is not None, weight_dtype=call["weight_dtype"],
                                out_dtype=call["out_dtype"], bias=call["bias"] is not None, rms=check.flag("rms", call["rms"]))
    return SimpleNamespace(dtype=dt, out_dtype=p.out_dtype, param_dtype=p.param_dtype, in_place=p.out == "same")


# The saved statistics first (their overlaps read "mean and out"), out (in place over input, of its dtype), input,
# and the weight and bias of one dtype (the input's, or float32 beside 2-byte rows).
_DECLARATION = _explain.Declaration(
    operands=(_explain.statistic("mean", written=True), _explain.statistic("rstd", written=True),
              _explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("weight", _explain.Fact("param_dtype"), optional=True),
              _explain.Memory("bias", _explain.Fact("param_dtype"), optional=True)),
    facts=_facts, in_place=(("out", "input"),), in_place_when=_explain.Fact("in_place"),
    strides=("input_stride", "out_stride"))


def _explain_call(out, input, weight, bias, epsilon, num_tokens, hidden_size, mean, rstd, **options) -> None:
    """Raise the error naming what the prepared launch declined (the shared explain path, on the declaration)."""
    _explain.explain(_DECLARATION, dict(out=out, input=input, weight=weight, bias=bias, epsilon=epsilon,
                                        num_tokens=num_tokens, hidden_size=hidden_size, mean=mean, rstd=rstd, **options))


def layer_norm_backward(grad_input: Operand, grad_weight: OptionalOperand, grad_bias: OptionalOperand,
                        grad_output: Operand, input: Operand, weight: OptionalOperand, epsilon: float,
                        num_tokens: int | None = None,
                        hidden_size: int | None = None, *,
                        dtype: DTypeLike | None = None, grad_output_stride: int | None = None,
                        input_stride: int | None = None, grad_input_stride: int | None = None,
                        grad_weight_dtype: DTypeLike | None = None, workspace: Workspace | None = None,
                        rows_per_block: int | None = None, stream: StreamLike = None, pdl: bool = True,
                        weight_dtype: DTypeLike | None = None, grad_output_dtype: DTypeLike | None = None,
                        mean: Operand | None = None, rstd: Operand | None = None) -> None:
    """The gradients of ``y = layer_norm(input, weight, bias)`` for the upstream gradient ``grad_output``:

        x_hat = (x - mean) * r,  g = weight * dy
        grad_input  = r * ((g - mean(g)) - x_hat * mean(x_hat * g))      per row, fp32, rounded once
        grad_weight = sum over rows of dy * x_hat,  grad_bias = sum over rows of dy

    ``grad_bias=None`` skips grad_bias (a LayerNorm without bias); grad_input and grad_weight are the same.
    ``weight=None`` (with ``grad_weight=None``): the backward of a LayerNorm without weight (``layer_norm``'s
    ``weight=None``; ``torch.nn.LayerNorm(elementwise_affine=False)`` when grad_bias is None too): g = dy,
    grad_input bitwise what a 16-byte aligned weight of ones would give, and grad_bias if asked for.
    Without weight and grad_bias: one launch, no sum over rows and no workspace.

    mean and r recomputed per row exactly as ``layer_norm`` computes them, or read from ``mean`` and ``rstd`` (both
    or neither): the forward's (``layer_norm``'s ``mean=``, ``rstd=``), one float32 per row (raw pointers or
    arrays of num_tokens), the same values, so the same bits, without two block reductions per row.
    grad_weight and grad_bias are summed in fp32 in a fixed order (bitwise reproducible for every ``rows_per_block``), written in
    the weight's dtype or, with ``grad_weight_dtype='float32'`` (or float32 arrays), in fp32; both get the
    same dtype. Mixed precision as in ``pyrms.rms_norm_backward``: a float32 weight beside bf16/fp16 rows
    (``weight_dtype='float32'`` for a raw pointer; ``layer_norm``'s fp32 gamma and beta), both gradients then
    float32, and optionally a float32 ``grad_output`` (``grad_output_dtype='float32'``). Arguments, in-place
    rules, the workspace and ``pdl`` as in ``pyrms.rms_norm_backward``, with
    ``pyrms.backward_workspace_bytes(num_tokens, hidden_size, layer_norm=True)`` bytes of workspace
    (``weight=False`` and ``grad_bias=`` for a backward without weight).
    """
    norm_backward(centered=True, grad_input=grad_input, grad_weight=grad_weight, grad_bias=grad_bias,
                  grad_output=grad_output, input=input, weight=weight, epsilon=epsilon, num_tokens=num_tokens,
                  hidden_size=hidden_size, dtype=dtype, grad_output_stride=grad_output_stride,
                  input_stride=input_stride, grad_input_stride=grad_input_stride, gemma=False,
                  grad_weight_dtype=grad_weight_dtype, workspace=workspace, rows_per_block=rows_per_block,
                  stream=stream, pdl=pdl, weight_dtype=weight_dtype, grad_output_dtype=grad_output_dtype, rstd=rstd,
                  mean=mean)

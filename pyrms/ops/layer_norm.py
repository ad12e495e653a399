"""``pyrms.layer_norm`` and ``pyrms.layer_norm_backward`` (kernels: cuda_src/layer_norm.cu)."""
from __future__ import annotations

from .. import driver, dtypes
from .. import plan as planner
from . import _operands as check
from . import _placement
from ._backward import norm_backward
from .._types import DTypeLike, OptionalOperand, Operand, StreamLike, Workspace
from ._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl

_SIGNATURE = ("ptr", "ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
# Up to this many rows the latency kernel launches (plan.FEW_ROWS; pyrms.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, strides, bias or not) of layer_norm, resolved once."""

    __slots__ = ("rows", "max_rows", "pointers", "placed", "has_weight")

    def __init__(self, device, dtype, hidden, input_stride, out_stride, has_bias, pdl, has_weight=True):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        p = planner.plan_layer_norm(dt, hidden, bias=has_bias, weight=has_weight)
        self.rows = RowLaunches(p, _SIGNATURE, (hidden, x_stride, o_stride), device, use_pdl(device, pdl),
                                (x_stride, o_stride))
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        size = dt.itemsize  # out: in place over input allowed, disjoint from the weight and bias
        self.has_weight = has_weight  # without one, the weight pointer is null and never read
        vectors = [(size, 0)] * (int(has_weight) + int(has_bias))
        self.pointers = Pointers(hidden, [(size, o_stride), (size, x_stride), *vectors],
                                 [(0, 1, True), *((0, 2 + k, False) for k in range(len(vectors)))])
        self.placed = _placement.for_device(device)

    def __call__(self, out, input, weight, bias, epsilon, num_tokens, stream) -> bool:
        if not scalars_ok(epsilon, num_tokens, self.max_rows):
            return False
        pointers = (out, input, *((weight,) if self.has_weight else ()), *(() if bias is None else (bias,)))
        if not self.pointers.ok(pointers, num_tokens):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        w, b = weight or 0, bias or 0
        self.rows(_FEW_ROWS, num_tokens, handle, out | input | w | b, out, input, w, b, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def layer_norm(out: OptionalOperand, input: Operand, weight: Operand | None, bias: Operand | None, epsilon: float,
               num_tokens: int | None = None, hidden_size: int | None = None, *, dtype: DTypeLike | None = None,
               input_stride: int | None = None, out_stride: int | None = None,
               stream: StreamLike = None, pdl: bool = True) -> OptionalOperand:
    """LayerNorm of each of ``num_tokens`` rows of ``hidden_size`` elements, written to ``out``:
    ``out = (x - mean) / sqrt(var + epsilon) * weight + bias``, var the population variance;
    ``bias=None`` for a LayerNorm without bias (no term added, as ``torch.nn.LayerNorm(bias=False)``);
    ``weight=None`` without a weight (``elementwise_affine=False`` when bias is None too).
    Returns ``out`` (a new pyrms.Tensor when ``out`` is None).

    Statistics in fp32 in two passes (the mean, then the squared deviations from it, over values held
    in registers: no E[x^2] - mean^2 cancellation); the whole expression in fp32, rounded once to the
    dtype. A row's result does not depend on the batch it sits in.

    ``out``, ``input``: [..., hidden_size]; ``weight``, ``bias``: [hidden_size]; raw device pointers
    (int) or arrays as in ``pyrms.rms_norm`` (sizes then inferred), contiguous along the hidden
    dimension, any element alignment. ``out`` may be ``input`` (in place). ``dtype``, strides,
    ``stream``, ``epsilon``, ``pdl``: as in ``pyrms.rms_norm``. Everything is validated before the launch,
    which is asynchronous on ``stream``.
    """
    if type(out) is int and type(input) is int and (weight is None or type(weight) is int) and (
            bias is None or type(bias) is int):
        static = (dtype, hidden_size, input_stride, out_stride, bias is not None, pdl, weight is not None)
        prepared = _prepared.get(*static)
        if prepared is not None and prepared(out, input, weight, bias, epsilon, num_tokens, stream):
            return out
        _explain(out, input, weight, bias, epsilon, num_tokens, hidden_size, dtype, input_stride, out_stride, stream, pdl)
        launched = _prepared.require(*static)(out, input, weight, bias, float(epsilon), int(num_tokens), stream)
        assert launched, "the checks above accept what the prepared launch declines"
        return out
    vectors = ([] if weight is None else [("weight", weight)]) + ([] if bias is None else [("bias", bias)])
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("input", input, input_stride, "input_stride", False),
                                                 ("out", out, out_stride, "out_stride", True)], vectors=vectors)
    if out is None:
        out = check.allocate_like(input, dt, max(rows, 1), hidden)
        found["out"] = (out.ptr, hidden)
    if rows:
        (x, x_stride), (o, o_stride) = found["input"], found["out"]
        layer_norm(o, x, None if weight is None else found["weight"][0], None if bias is None else found["bias"][0],
                   epsilon, rows, hidden,
                   dtype=dt, input_stride=x_stride, out_stride=o_stride, stream=stream, pdl=pdl)
    return out


def _explain(out, input, weight, bias, epsilon, num_tokens, hidden_size, dtype, input_stride, out_stride, stream,
             pdl) -> None:
    """Raise the error naming what the prepared launch declined."""
    check.flag("pdl", pdl)
    num_tokens, hidden = check.sizes(num_tokens, hidden_size)
    check.epsilon(epsilon)
    vectors = {name: v for name, v in (("weight", weight), ("bias", bias)) if v is not None}
    _, _, r = check.layout(num_tokens, hidden, dtype,
                           rows={"out": (out, out_stride, "out_stride"), "input": (input, input_stride, "input_stride")},
                           vectors=vectors)
    check.disjoint([r["out"]], [r[name] for name in ("input", *vectors)], in_place={("out", "input")})
    _placement.check(driver.selected_device(), {name: region.ptr for name, region in r.items()}, stream)


def layer_norm_backward(grad_input: Operand, grad_weight: OptionalOperand, grad_bias: OptionalOperand,
                        grad_output: Operand, input: Operand, weight: OptionalOperand, epsilon: float,
                        num_tokens: int | None = None,
                        hidden_size: int | None = None, *,
                        dtype: DTypeLike | None = None, grad_output_stride: int | None = None,
                        input_stride: int | None = None, grad_input_stride: int | None = None,
                        grad_weight_dtype: DTypeLike | None = None, workspace: Workspace | None = None,
                        rows_per_block: int | None = None, stream: StreamLike = None, pdl: bool = True) -> None:
    """The gradients of ``y = layer_norm(input, weight, bias)`` for the upstream gradient ``grad_output``:

        x_hat = (x - mean) * r,  g = weight * dy
        grad_input  = r * ((g - mean(g)) - x_hat * mean(x_hat * g))      per row, fp32, rounded once
        grad_weight = sum over rows of dy * x_hat,  grad_bias = sum over rows of dy

    ``grad_bias=None`` skips grad_bias (a LayerNorm without bias); grad_input and grad_weight are the same.
    ``weight=None`` (with ``grad_weight=None``): the backward of a LayerNorm without weight (``layer_norm``'s
    ``weight=None``; ``torch.nn.LayerNorm(elementwise_affine=False)`` when grad_bias is None too): g = dy,
    grad_input bitwise what a 16-byte aligned weight of ones would give, and grad_bias if asked for.
    Without weight and grad_bias: one launch, no sum over rows and no workspace.

    mean and r recomputed per row exactly as ``layer_norm`` computes them. grad_weight and grad_bias
    are summed in fp32 in a fixed order (bitwise reproducible for every ``rows_per_block``), written in
    the dtype or, with ``grad_weight_dtype='float32'`` (or float32 arrays), in fp32; both get the same
    dtype. Arguments, in-place rules, the workspace and ``pdl`` as in ``pyrms.rms_norm_backward``, with
    ``pyrms.backward_workspace_bytes(num_tokens, hidden_size, layer_norm=True)`` bytes of workspace
    (``weight=False`` and ``grad_bias=`` for a backward without weight).
    """
    norm_backward(layer_norm=True, grad_input=grad_input, grad_weight=grad_weight, grad_bias=grad_bias,
                  grad_output=grad_output, input=input, weight=weight, epsilon=epsilon, num_tokens=num_tokens,
                  hidden_size=hidden_size, dtype=dtype, grad_output_stride=grad_output_stride,
                  input_stride=input_stride, grad_input_stride=grad_input_stride, gemma=False,
                  grad_weight_dtype=grad_weight_dtype, workspace=workspace, rows_per_block=rows_per_block,
                  stream=stream, pdl=pdl)

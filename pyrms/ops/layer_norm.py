"""``pyrms.layer_norm`` and ``pyrms.layer_norm_backward`` (kernels: cuda_src/layer_norm.cu)."""
from __future__ import annotations

from .. import driver, kernels
from .. import plan as planner
from . import _operands as check
from ._backward import norm_backward
from .._types import DTypeLike, Operand, StreamLike, Workspace

_SIGNATURE = ("ptr", "ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")


def layer_norm(out: Operand, input: Operand, weight: Operand, bias: Operand | None, epsilon: float, num_tokens: int,
               hidden_size: int, *, dtype: DTypeLike | None = None, input_stride: int | None = None,
               out_stride: int | None = None, stream: StreamLike = None) -> None:
    """LayerNorm of each of ``num_tokens`` rows of ``hidden_size`` elements, written to ``out``:
    ``out = (x - mean) / sqrt(var + epsilon) * weight + bias``, var the population variance;
    ``bias=None`` for a LayerNorm without bias (no term added, as ``torch.nn.LayerNorm(bias=False)``).

    Statistics in fp32 in two passes (the mean, then the squared deviations from it, over values held
    in registers: no E[x^2] - mean^2 cancellation); the whole expression in fp32, rounded once to the
    dtype. A row's result does not depend on the batch it sits in.

    ``out``, ``input``: [num_tokens, hidden_size]; ``weight``, ``bias``: [hidden_size]; raw device
    pointers (int), pyrms Tensors or ``__cuda_array_interface__`` objects, contiguous along the hidden
    dimension, any element alignment. ``out`` may be ``input`` (in place). ``dtype``, strides,
    ``stream``, ``epsilon``: as in ``pyrms.rms_norm``. Everything is validated before the launch,
    which is asynchronous on ``stream``.
    """
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    vectors = {"weight": weight} if bias is None else {"weight": weight, "bias": bias}
    dt, _, r = check.layout(num_tokens, hidden, dtype,
                            rows={"out": (out, out_stride, "out_stride"), "input": (input, input_stride, "input_stride")},
                            vectors=vectors)
    check.disjoint([r["out"]], [r[name] for name in ("input", *vectors)], in_place={("out", "input")})
    handle = driver.stream_handle(stream)
    device = driver.selected_device()
    check.same_device([region.op for region in r.values()], device.ordinal)
    p = planner.plan_layer_norm(dt, hidden, bias=bias is not None)
    kernel = kernels.get(p.source, p.expression, p.group, _SIGNATURE, device)
    kernel.launch(num_tokens, p.block, (r["out"].ptr, r["input"].ptr, r["weight"].ptr, r["bias"].ptr if p.bias else 0,
                                        eps, hidden, r["input"].stride, r["out"].stride), handle)


def layer_norm_backward(grad_input: Operand, grad_weight: Operand, grad_bias: Operand | None, grad_output: Operand,
                        input: Operand, weight: Operand, epsilon: float, num_tokens: int, hidden_size: int, *,
                        dtype: DTypeLike | None = None, grad_output_stride: int | None = None,
                        input_stride: int | None = None, grad_input_stride: int | None = None,
                        grad_weight_dtype: DTypeLike | None = None, workspace: Workspace | None = None,
                        rows_per_block: int | None = None, stream: StreamLike = None) -> None:
    """The gradients of ``y = layer_norm(input, weight, bias)`` for the upstream gradient ``grad_output``:

        x_hat = (x - mean) * r,  g = weight * dy
        grad_input  = r * ((g - mean(g)) - x_hat * mean(x_hat * g))      per row, fp32, rounded once
        grad_weight = sum over rows of dy * x_hat,  grad_bias = sum over rows of dy

    ``grad_bias=None`` skips grad_bias (a LayerNorm without bias); grad_input and grad_weight are the same.

    mean and r recomputed per row exactly as ``layer_norm`` computes them. grad_weight and grad_bias
    are summed in fp32 in a fixed order (bitwise reproducible for every ``rows_per_block``), written in
    the dtype or, with ``grad_weight_dtype='float32'`` (or float32 arrays), in fp32; both get the same
    dtype. Arguments, in-place rules and the workspace as in ``pyrms.rms_norm_backward``, with
    ``pyrms.backward_workspace_bytes(num_tokens, hidden_size, layer_norm=True)`` bytes of workspace.
    """
    norm_backward(layer_norm=True, grad_input=grad_input, grad_weight=grad_weight, grad_bias=grad_bias,
                  grad_output=grad_output, input=input, weight=weight, epsilon=epsilon, num_tokens=num_tokens,
                  hidden_size=hidden_size, dtype=dtype, grad_output_stride=grad_output_stride,
                  input_stride=input_stride, grad_input_stride=grad_input_stride, gemma=False,
                  grad_weight_dtype=grad_weight_dtype, workspace=workspace, rows_per_block=rows_per_block,
                  stream=stream)

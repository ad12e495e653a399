"""``pyrms.fused_add_rms_norm``: residual add + RMSNorm in place (kernel: cuda_src/fused_add_rms_norm.cu)."""
from __future__ import annotations

from .. import driver, kernels
from .. import plan as planner
from . import _operands as check
from .._types import DTypeLike, Operand, StreamLike

_SIGNATURE = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")


def fused_add_rms_norm(input: Operand, residual: Operand, weight: Operand, epsilon: float, num_tokens: int,
                       hidden_size: int, *, dtype: DTypeLike | None = None, input_stride: int | None = None,
                       residual_stride: int | None = None, stream: StreamLike = None, gemma: bool = False,
                       round_once: bool = False) -> None:
    """vLLM's fused_add_rms_norm, in place on ``num_tokens`` rows of ``hidden_size`` elements:
    ``residual <- input + residual`` (added in fp32, rounded once to the dtype), then
    ``input <- rms_norm(residual, weight)`` of that rounded sum, bit for bit what ``pyrms.rms_norm``
    would compute from the new residual (same ``gemma`` and ``round_once`` options).

    ``input``, ``residual``, ``weight``: raw device pointers (int), pyrms Tensors, or objects exposing
    ``__cuda_array_interface__``; [num_tokens, hidden_size] (weight [hidden_size]), contiguous along
    the hidden dimension, any element alignment of each pointer. ``input`` and ``residual`` must be
    disjoint, each with its own row stride (``input_stride``/``residual_stride``, >= hidden_size;
    default: the array's, or hidden_size). ``dtype``, ``stream``, ``epsilon``: as in ``pyrms.rms_norm``.

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument. The launch is asynchronous on ``stream``.
    """
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    dt, _, r = check.layout(num_tokens, hidden, dtype,
                            rows={"input": (input, input_stride, "input_stride"),
                                  "residual": (residual, residual_stride, "residual_stride")},
                            vectors={"weight": weight})
    check.disjoint([r["input"], r["residual"]], [r["weight"]])
    handle = driver.stream_handle(stream)
    device = driver.selected_device()
    check.same_device([region.op for region in r.values()], device.ordinal)
    p = planner.plan_fused_add_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
    kernel = kernels.get(p.source, p.expression, p.group, _SIGNATURE, device)
    kernel.launch(num_tokens, p.block, (r["input"].ptr, r["residual"].ptr, r["weight"].ptr, eps, hidden,
                                        r["input"].stride, r["residual"].stride), handle)

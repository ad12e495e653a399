"""``pyrms.rms_norm_backward``: dx and dweight of RMSNorm (kernels: cuda_src/rms_norm_backward.cu)."""
from __future__ import annotations

from .._norm_backward.prepared import norm_backward
from ..._types import DTypeLike, Operand, OptionalOperand, StreamLike, Workspace


def rms_norm_backward(grad_input: Operand, grad_weight: OptionalOperand, grad_output: Operand, input: Operand,
                      weight: OptionalOperand,
                      epsilon: float, num_tokens: int | None = None, hidden_size: int | None = None, *,
                      dtype: DTypeLike | None = None,
                      grad_output_stride: int | None = None, input_stride: int | None = None,
                      grad_input_stride: int | None = None, gemma: bool = False,
                      grad_weight_dtype: DTypeLike | None = None, workspace: Workspace | None = None,
                      rows_per_block: int | None = None, stream: StreamLike = None, pdl: bool = True,
                      weight_dtype: DTypeLike | None = None, grad_output_dtype: DTypeLike | None = None,
                      rstd: OptionalOperand = None, grad_bias: OptionalOperand = None) -> None:
    """The gradients of the RMSNorm forward ``y = input * r * weight`` for the upstream gradient ``grad_output``:

        r = 1 / sqrt(mean(x^2) + epsilon),  x_hat = x * r,  g = weight * dy   (1 + weight with gemma)
        grad_input  = r * (g - x_hat * mean(x_hat * g))        per row, fp32, rounded once to the dtype
        grad_weight = sum over all rows of dy * x_hat          fp32, in a fixed order, rounded once

    ``weight=None`` (with ``grad_weight=None``): the backward of an RMSNorm without weight (the forward's
    ``weight=None``, ``torch.nn.RMSNorm(elementwise_affine=False)``): g = dy, grad_input only, bitwise what a
    16-byte aligned weight of ones would give; one launch, no sum over rows and no workspace.

    Nothing from the forward is needed: r is recomputed per row. Or pass the forward's ``rstd`` (its ``rstd=``
    output: float32, one per row, a raw pointer or a (num_tokens,) or (num_tokens, 1) array), and
    it is read instead: the forward's r is the one recomputed here (the same tree, for the same epsilon), so
    the results are the same bits, with one reduction per row less. Any other float32 values are used as
    given (r of each row), as QuACK's and Apex's backward take them. grad_weight is summed over chunks of
    16 rows, then over chunks, in an order fixed by the row indices alone, so it is bitwise the same
    from run to run and for every ``rows_per_block`` (rows per block of the first kernel: 1 or a
    multiple of 16; by default 1 up to 256 rows, else 16; only the launch shape, for tuning and
    tests). The rounding options of the forward do not apply: this is the gradient of the exact function.

    Memory arguments: raw device pointers (int) or arrays as the forward takes them (sizes then
    inferred). grad_input, grad_output, input: [num_tokens, hidden_size] (or [..., hidden_size]), contiguous along the hidden
    dimension, each with its own row stride (``*_stride``, default: the array's, or hidden_size);
    weight, grad_weight: [hidden_size]. Any element alignment of any pointer. grad_input may be
    grad_output or input (in place); everything else must be disjoint. grad_weight is written in the
    weight's dtype, or in float32 with ``grad_weight_dtype='float32'`` (or a float32 array). ``dtype``,
    ``stream``, ``epsilon``, ``pdl``: as in the forward (``pdl`` applies to both launches).

    Mixed precision (bfloat16 or float16 rows): ``weight`` float32 (fp32 master weights: a float32 array,
    or ``weight_dtype='float32'`` for a raw pointer), grad_weight then float32; and ``grad_output`` float32
    too if wished (a float32 array, or ``grad_output_dtype='float32'``: the gradient of the float32 output
    that the forward writes with such a weight and ``out_dtype='float32'``). Both are read exactly, so the
    arithmetic is the one above; grad_input stays in the rows' dtype (not in place over a float32
    grad_output).

    Workspace: ``pyrms.backward_workspace_bytes(num_tokens, hidden_size)`` bytes of fp32 scratch (pass
    it ``rows_per_block=`` too when you pass one here; none without a weight). By
    default each call takes it from pyrms's stream-ordered memory pool on ``stream`` and frees it there
    after its kernels, so it is safe with any stream use (closing the stream right after, many
    threads, CUDA graph capture: the graph then owns it); the pool keeps freed memory for reuse until
    ``pyrms.release_workspaces()``. Or pass ``workspace=`` (a 16-byte aligned pointer, DeviceBuffer or
    array you own).

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument (grad_weight given with ``weight=None``, or gemma without a weight, too). Two launches are
    queued on ``stream`` (one without a weight), asynchronously.
    """
    norm_backward(centered=False, grad_input=grad_input, grad_weight=grad_weight, grad_bias=grad_bias,
                  grad_output=grad_output, input=input, weight=weight, epsilon=epsilon, num_tokens=num_tokens,
                  hidden_size=hidden_size, dtype=dtype, grad_output_stride=grad_output_stride,
                  input_stride=input_stride, grad_input_stride=grad_input_stride, gemma=gemma,
                  grad_weight_dtype=grad_weight_dtype, workspace=workspace, rows_per_block=rows_per_block,
                  stream=stream, pdl=pdl, weight_dtype=weight_dtype, grad_output_dtype=grad_output_dtype, rstd=rstd)

"""gated_rms_norm for PyTorch: the custom ops ``torch.ops.pyrms.gated_rms_norm`` and its backward
``torch.ops.pyrms.gated_rms_norm_backward`` (new outputs; their fakes check dtypes and shapes only), their eager
launches on torch tensors, the autograd that joins them, and the user function ``pyrms.torch.gated_rms_norm``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.gated_rms_norm(x, z, weight?, eps, group_size?, norm_before_gate) -> Tensor
    torch.ops.pyrms.gated_rms_norm_backward(grad, x, z, weight?, eps, group_size?, norm_before_gate)
        -> (grad_x, grad_z, grad_weight)

Both are pyrms's kernels, so the gradients are bit-reproducible across batches as the forward is. grad_weight is an
empty tensor without a weight (a custom op's tensor outputs cannot be None); autograd then gets None for it. No
``from __future__ import annotations`` here: torch infers the ops' schemas from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import (check_device, check_meta, current_stream, dtype_name, empty_rows_like,
                              parameter_grad_like, rows_of)
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import records as _records
from .backward import gated_rms_norm_backward as _gated_rms_norm_backward
from .op import gated_rms_norm as _gated_rms_norm
from .plan import group_size_arg, plan_gated_rms_norm_backward

__all__ = ["gated_rms_norm"]


def _group_size(group_size, hidden) -> int:
    """group_size_arg's group size, a symbolic int specialized to its value first: torch.compile makes an int
    argument that changes between calls symbolic, and the kernels are planned per group size."""
    return group_size_arg(int(group_size) if isinstance(group_size, torch.SymInt) else group_size, hidden)


def _check_meta(x: Tensor, z: Tensor, weight: Optional[Tensor], group_size: Optional[int]) -> str:
    """What needs no data: x's dtype, z of x's shape and dtype, the weight [hidden] of x's dtype or float32, and
    group_size dividing the hidden size. Returns x's pyrms dtype name."""
    name = check_meta(x, {"weight": weight}, {"z": z}, mixed_vectors=("weight",))
    _group_size(group_size, x.shape[-1])
    return name


def launch(out: Tensor, x: Tensor, z: Tensor, weight: Optional[Tensor], eps: float, group_size: Optional[int],
           norm_before_gate: bool) -> None:
    """out <- the gated RMSNorm of x and z (see pyrms.torch.gated_rms_norm), on torch's current stream: pyrms's
    raw-pointer call on the tensors' rows (a copy of x or z only where no one row stride addresses its rows)."""
    dtype = _check_meta(x, z, weight, group_size)
    device = check_device({"x": x, "z": z, "out": out, "weight": weight})
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    if rows == 0:
        return
    x_rows, x_stride = rows_of(x)
    z_rows, z_stride = rows_of(z)
    _gated_rms_norm(x_rows.data_ptr(), z_rows.data_ptr(), None if weight is None else weight.data_ptr(), float(eps),
                    out=out.data_ptr(), group_size=group_size, norm_before_gate=norm_before_gate, num_tokens=rows,
                    hidden_size=hidden, dtype=dtype, x_stride=x_stride, z_stride=z_stride, out_stride=hidden,
                    weight_dtype=None if weight is None else dtype_name(weight.dtype, "weight"),
                    stream=current_stream(device))


@torch.library.custom_op("pyrms::gated_rms_norm", mutates_args=())
def gated_rms_norm_op(x: Tensor, z: Tensor, weight: Optional[Tensor], eps: float, group_size: Optional[int],
                      norm_before_gate: bool) -> Tensor:
    out = empty_rows_like(x)
    launch(out, x, z, weight, eps, group_size, norm_before_gate)
    return out


@gated_rms_norm_op.register_fake
def _(x, z, weight, eps, group_size, norm_before_gate):
    _check_meta(x, z, weight, group_size)
    return empty_rows_like(x)


def _check_backward_meta(grad: Tensor, x: Tensor, z: Tensor, weight: Optional[Tensor],
                         group_size: Optional[int]) -> str:
    """_check_meta's, and grad of x's shape and dtype."""
    name = _check_meta(x, z, weight, group_size)
    check_meta(x, {}, {"grad": grad})
    return name


def _backward_outputs(x: Tensor, weight: Optional[Tensor]) -> tuple:
    """(grad_x, grad_z, grad_weight): rows like x, and the weight's [hidden] of its dtype (empty without one)."""
    return (empty_rows_like(x), empty_rows_like(x),
            parameter_grad_like(x, weight is not None, None if weight is None else weight.dtype))


def backward_launch(grad: Tensor, x: Tensor, z: Tensor, weight: Optional[Tensor], eps: float,
                    group_size: Optional[int], norm_before_gate: bool) -> tuple:
    """(grad_x, grad_z, grad_weight) of gated_rms_norm (pyrms.gated_rms_norm_backward's arithmetic), on torch's
    current stream, its workspace from torch's caching allocator on that stream; grad_weight empty without a
    weight, zeros for an empty batch."""
    dtype = _check_backward_meta(grad, x, z, weight, group_size)
    device = check_device({"grad": grad, "x": x, "z": z, "weight": weight})
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    grad_x, grad_z, grad_weight = _backward_outputs(x, weight)
    if rows == 0:
        grad_weight.zero_()
        return grad_x, grad_z, grad_weight
    gs = _group_size(group_size, hidden)
    weight_dtype = None if weight is None else dtype_name(weight.dtype, "weight")
    nbytes = plan_gated_rms_norm_backward(dtype, hidden, gs, norm_before_gate=norm_before_gate,
                                          weight_dtype="none" if weight is None else weight_dtype).workspace_bytes(rows)
    # freed when this call returns: torch reuses it only for work queued after the kernels on this stream
    ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
    (x_rows, x_stride), (z_rows, z_stride), (g_rows, g_stride) = rows_of(x), rows_of(z), rows_of(grad)
    _gated_rms_norm_backward(grad_x.data_ptr(), grad_z.data_ptr(), None if weight is None else grad_weight.data_ptr(),
                             g_rows.data_ptr(), x_rows.data_ptr(), z_rows.data_ptr(),
                             None if weight is None else weight.data_ptr(), float(eps), group_size=gs,
                             norm_before_gate=norm_before_gate, num_tokens=rows, hidden_size=hidden, dtype=dtype,
                             grad_x_stride=hidden, grad_z_stride=hidden, grad_output_stride=g_stride,
                             x_stride=x_stride, z_stride=z_stride, weight_dtype=weight_dtype,
                             workspace=None if ws is None else ws.data_ptr(), stream=current_stream(device))
    return grad_x, grad_z, grad_weight


@torch.library.custom_op("pyrms::gated_rms_norm_backward", mutates_args=())
def gated_rms_norm_backward_op(grad: Tensor, x: Tensor, z: Tensor, weight: Optional[Tensor], eps: float,
                               group_size: Optional[int], norm_before_gate: bool) -> tuple[Tensor, Tensor, Tensor]:
    return backward_launch(grad, x, z, weight, eps, group_size, norm_before_gate)


@gated_rms_norm_backward_op.register_fake
def _(grad, x, z, weight, eps, group_size, norm_before_gate):
    _check_backward_meta(grad, x, z, weight, group_size)
    return _backward_outputs(x, weight)


_GATED_RMS_NORM_BACKWARD = torch.ops.pyrms.gated_rms_norm_backward.default


def _save(ctx, inputs, output) -> None:
    x, z, weight, eps, group_size, norm_before_gate = inputs
    ctx.save_for_backward(x, z, weight)
    ctx.options = (eps, group_size, norm_before_gate)


def _backward(ctx, grad):
    x, z, weight = ctx.saved_tensors
    grad_x, grad_z, grad_weight = _GATED_RMS_NORM_BACKWARD(grad, x, z, weight, *ctx.options)
    return grad_x, grad_z, None if weight is None else grad_weight, None, None, None


gated_rms_norm_op.register_autograd(_backward, setup_context=_save)

_GATED_RMS_NORM = torch.ops.pyrms.gated_rms_norm.default


def gated_rms_norm(x: Tensor, z: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6,
                   group_size: Optional[int] = None, norm_before_gate: bool = True) -> Tensor:
    """mamba_ssm's ``rmsnorm_fn(x, weight, None, z=z, eps=eps, group_size=group_size,
    norm_before_gate=norm_before_gate)`` (vLLM's ``RMSNormGated``) on torch tensors: ``pyrms.gated_rms_norm``
    (its docstring says the arithmetic and the rounding), on torch's current stream; returns a new tensor of x's
    shape and dtype.

    ``x``, ``z``: CUDA tensors [..., hidden] of one dtype (bfloat16, float16 or float32); ``weight``: [hidden] of
    x's dtype or float32, or None; ``group_size``: None (the whole row) or a divisor of hidden. Differentiable in
    x, z and the weight: the backward is pyrms's kernel (``pyrms.gated_rms_norm_backward``'s arithmetic, the
    weight's gradient summed in a fixed order: bitwise the same for every batch split). Under torch.compile both are
    the custom ops ``torch.ops.pyrms.gated_rms_norm`` and ``torch.ops.pyrms.gated_rms_norm_backward``.
    """
    if torch.compiler.is_compiling() or _dispatch_modes() or _records(x, weight, z):
        return _GATED_RMS_NORM(x, z, weight, float(eps), group_size, norm_before_gate)
    out = empty_rows_like(x)
    launch(out, x, z, weight, eps, group_size, norm_before_gate)
    return out

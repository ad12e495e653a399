"""gated_rms_norm for PyTorch: the custom op ``torch.ops.pyrms.gated_rms_norm`` (a new output; its fake checks
dtypes and shapes only), its eager launch on torch tensors, and the user function ``pyrms.torch.gated_rms_norm``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.gated_rms_norm(x, z, weight?, eps, group_size?, norm_before_gate) -> Tensor

The forward is pyrms's kernel; the backward is the formula's gradient in torch ops, in fp32 (_grads): no pyrms
backward kernel yet, so the gradients are not bit-reproducible across batches as the forward is. No
``from __future__ import annotations`` here: torch infers the op's schema from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import check_device, check_meta, current_stream, dtype_name, empty_rows_like, rows_of
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import records as _records
from .op import gated_rms_norm as _gated_rms_norm
from .plan import group_size_arg

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


def _grads(grad: Tensor, x: Tensor, z: Tensor, weight: Optional[Tensor], eps: float, group_size: Optional[int],
           norm_before_gate: bool) -> tuple:
    """(dx, dz, dweight) of the forward's formula in fp32, each in its input's dtype (dweight None without a weight).
    Per group, with s = silu(z), v = x (or x * s with the gate first), r = 1 / sqrt(mean(v^2) + eps), n = v * r:
    dv = r * (dn - n * mean(dn * n)) where dn = dy * w (* s, norm first) is the gradient reaching n; then
    norm first: dx = dv, ds = dy * n * w, dw = sum over rows of dy * n * s; gate first: dx = dv * s, ds = dv * x,
    dw = sum of dy * n; and dz = ds * silu'(z), silu'(z) = sigmoid(z) * (1 + z * (1 - sigmoid(z)))."""
    hidden = x.shape[-1]
    gs = _group_size(group_size, hidden)
    xf, zf, dy = (t.reshape(-1, hidden).float() for t in (x, z, grad))
    wf = 1.0 if weight is None else weight.float()
    sg = torch.sigmoid(zf)
    s = zf * sg
    v = (xf if norm_before_gate else xf * s).reshape(-1, hidden // gs, gs)
    r = torch.rsqrt(v.square().mean(-1, keepdim=True) + eps)
    n = v * r
    dn = (dy * wf * s if norm_before_gate else dy * wf).reshape(-1, hidden // gs, gs)
    dv = (r * (dn - n * (dn * n).mean(-1, keepdim=True))).reshape(-1, hidden)
    n = n.reshape(-1, hidden)
    if norm_before_gate:
        dx, ds, dw = dv, dy * n * wf, dy * n * s
    else:
        dx, ds, dw = dv * s, dv * xf, dy * n
    dz = ds * (sg * (1.0 + zf * (1.0 - sg)))
    dweight = None if weight is None else dw.sum(0).to(weight.dtype)
    return dx.reshape(x.shape).to(x.dtype), dz.reshape(z.shape).to(z.dtype), dweight


def _save(ctx, inputs, output) -> None:
    x, z, weight, eps, group_size, norm_before_gate = inputs
    ctx.save_for_backward(x, z, weight)
    ctx.options = (eps, group_size, norm_before_gate)


def _backward(ctx, grad):
    x, z, weight = ctx.saved_tensors
    return (*_grads(grad, x, z, weight, *ctx.options), None, None, None)


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
    x, z and the weight: the backward is the formula's gradient in torch ops, in fp32 (pyrms has no backward kernel
    for it yet). Under torch.compile it is the custom op ``torch.ops.pyrms.gated_rms_norm``.
    """
    if torch.compiler.is_compiling() or _dispatch_modes() or _records(x, weight, z):
        return _GATED_RMS_NORM(x, z, weight, float(eps), group_size, norm_before_gate)
    out = empty_rows_like(x)
    launch(out, x, z, weight, eps, group_size, norm_before_gate)
    return out

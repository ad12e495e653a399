"""rms_norm for PyTorch: the custom op ``torch.ops.pyrms.rms_norm`` (fake implementation, autograd through
rms_norm_backward's op), its eager launch on torch tensors, the ``torch.autograd.Function`` that eager
autograd goes through, the user function ``pyrms.torch.rms_norm`` and the module over it, ``RMSNorm``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.rms_norm(x, weight?, eps, gemma, round_once) -> Tensor

Layouts: ``x`` is [..., hidden]; its rows are addressed with one row stride when its leading dimensions
nest (contiguous tensors, row slices such as ``big[..., :hidden]``); other views of up to three leading
dimensions are read where they lie (pyrms.rms_norm's N-D kernel), any other layout from a contiguous copy.
The output is a new tensor whose rows lie ``hidden`` apart. Routing: pyrms/torch/_routing.py. No
``from __future__ import annotations`` here: torch infers the op's schema from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ... import driver
from ...model_norms import Keep, Swap, decide
from ...torch._layout import (DTYPE_NAMES, as_float32, check_device, check_meta, current_stream, empty_rows_like, mixed,
                              per_head, row_stride, rows_of, vector_weight)
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import records as _records
from ...torch.modules import facts, swaps_in
from .. import _views
from ..layer_norm import torch_binding as _layer_norm
from ..rms_norm_backward import torch_binding as _backward
from .._row_plan import FEW_ROWS
from .op import launch_prepared as _launch_prepared
from .op import prepared as _prepared_rms_norm
from .op import rms_norm as _rms_norm

__all__ = ["rms_norm", "RMSNorm"]


# --- the eager launch ---------------------------------------------------------------------------------


def launch(x: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool, round_once: bool) -> torch.Tensor:
    """RMSNorm of x's rows into a new tensor (see pyrms.torch.rms_norm); weight None: no weight."""
    # The hot path: every check reads one torch attribute, and any failure goes to _explain for its message.
    # get_device() is -1 on the CPU: two equal indices >= 0 mean two tensors on one GPU (and no driver is
    # asked about a CPU tensor, which _explain refuses by name).
    try:
        dtype = DTYPE_NAMES.get(x.dtype)
        ok = (dtype is not None and (device := x.get_device()) >= 0
              and device == (driver._selected.device or driver.selected_device()).ordinal)  # a frame less if selected
        hidden = x.shape[-1]
        ok = ok and vector_weight(weight, hidden, device, x.dtype)
    except (AttributeError, IndexError):  # not a tensor, or a 0-d one
        ok = False
    if not ok:
        if (weight is not None and isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)
                and (mixed(x, weight) or per_head(weight))):
            return _launch_other_weight(x, weight, eps, gemma, round_once)
        _explain(x, weight)
    if x.is_contiguous():
        out, stride = torch.empty_like(x), hidden
    else:
        stride = row_stride(x)
        out = empty_rows_like(x)
        if stride is None:
            if _nd_view(x):
                return _rms_norm_view(out, x, weight, eps, gemma, round_once, device)
            x, stride = x.contiguous(), hidden
    numel = x.numel()
    if numel:
        weightless = weight is None  # its own kernel (pyrms.rms_norm's weight_dtype "none"), a null weight
        args = (out.data_ptr(), x.data_ptr(), 0 if weightless else weight.data_ptr(), float(eps), numel // hidden,
                current_stream(device))
        if not _launch_prepared((dtype, hidden, stride, hidden, gemma, round_once, True, "none" if weightless else None,
                                 None, None), args):  # the general path says what is wrong
            _rms_norm(args[0], args[1], None if weightless else args[2], args[3], args[4], hidden, dtype=dtype,
                      input_stride=stride, out_stride=hidden, stream=args[5], gemma=gemma, round_once=round_once)
    return out


def _nd_view(x: torch.Tensor) -> bool:
    """Whether pyrms's N-D kernel addresses x's rows where they lie: the hidden dimension contiguous and
    the leading ones collapsing to at most three (pyrms.ops._views)."""
    if x.stride(-1) != 1:
        return False
    try:
        _views.joint_lead(tuple(x.shape[:-1]), {"x": x.stride()[:-1]}, False, x.shape[-1])
    except ValueError:
        return False
    return True


def _rms_norm_view(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool,
                   round_once: bool, device: int) -> torch.Tensor:
    """rms_norm of a view whose leading dimensions no one stride addresses (QK-norm's heads of a fused
    QKV projection, a transposed [batch, heads, seq, head_dim]): pyrms.rms_norm's N-D kernel reads x
    where it lies, instead of from a contiguous copy (a second pass over x and an allocation)."""
    if x.numel():
        _rms_norm(out, x, weight, float(eps), stream=current_stream(device), gemma=gemma, round_once=round_once)
    return out


def _out_dtype(x: torch.Tensor, weight: torch.Tensor | None, round_once: bool) -> torch.dtype:
    """The output's dtype: x's, or float32 for a weight of another dtype with the default rounding (pyrms.torch.
    rms_norm says why)."""
    return torch.float32 if mixed(x, weight) and not round_once else x.dtype


def _launch_other_weight(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool,
                         round_once: bool) -> torch.Tensor:
    """rms_norm with a weight of another dtype than x (fp32 master weights beside bf16 activations under
    autocast: read as float32, the output in _out_dtype), or one per head ([heads, head_dim] beside x
    [..., heads, head_dim]: pyrms.rms_norm's weight per outer row, with the heads made the outer dimension)."""
    check_meta(x, {"weight": weight}, mixed_vectors=("weight",), per_head=("weight",))
    device = check_device({"x": x, "weight": weight})
    if not per_head(weight):
        return _launch_rows(x, weight, eps, gemma, round_once)[0]
    w = as_float32(weight) if mixed(x, weight) else weight
    out = empty_rows_like(x, _out_dtype(x, weight, round_once))
    if x.numel():
        heads_first = x.movedim(-2, 0)
        if not _nd_view(heads_first):  # leading dimensions that do not collapse to three: read from a copy
            heads_first = x.contiguous().movedim(-2, 0)
        _rms_norm(out.movedim(-2, 0), heads_first, w, float(eps), stream=current_stream(device), gemma=gemma,
                  round_once=round_once)
    return out


def _launch_rows(x: torch.Tensor, weight: torch.Tensor | None, eps: float, gemma: bool, round_once: bool,
                 save_rstd: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(out, rstd) of rms_norm over x's rows one stride apart (or a contiguous copy's), with a weight [hidden] of
    x's dtype, of another (read as float32, the output in _out_dtype), or none; the operands already checked.
    save_rstd: each row's inv_rms also stored into a new float32 [rows] tensor (for the backward to read),
    where the rows run one per block; None where they would be packed several to a warp (short rows of many
    tokens, where recomputing costs the backward little)."""
    mix = mixed(x, weight)
    w = as_float32(weight) if mix else weight
    out = empty_rows_like(x, _out_dtype(x, weight, round_once))
    rstd = None
    if x.numel():
        x, stride = rows_of(x)
        hidden, dtype = x.shape[-1], DTYPE_NAMES[x.dtype]
        rows = x.numel() // hidden
        two_byte = mix and x.dtype != torch.float32  # fp32 rows: one dtype all through
        w_kind = "none" if weight is None else "float32" if two_byte else None
        out_kind = "float32" if two_byte and out.dtype == torch.float32 else None
        stream = current_stream(x.get_device())
        static = (dtype, hidden, stride, hidden, gemma, round_once, True, w_kind, None, out_kind)
        prepared = _prepared_rms_norm(*static)
        if save_rstd and prepared is not None and (prepared.packed is None or rows <= FEW_ROWS):
            rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        args = (out.data_ptr(), x.data_ptr(), 0 if w is None else w.data_ptr(), float(eps), rows, stream)
        # Through the last call's memo: a training loop's forward repeats its shapes and, from torch's caching
        # allocator, its addresses (rstd's too), so from the second step on it is one bound launch.
        if prepared is None or not _launch_prepared(static, (*args, 0 if rstd is None else rstd.data_ptr())):
            _rms_norm(args[0], args[1], None if w is None else args[2], args[3], rows, hidden, dtype=dtype, input_stride=stride,
                      out_stride=hidden, stream=stream, gemma=gemma, round_once=round_once, weight_dtype=w_kind,
                      out_dtype=out_kind, rstd=rstd)
    return out, rstd


def _forward_saving_rstd(x, weight, eps: float, gemma: bool, round_once: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forward under eager autograd: (out, rstd), rstd each row's inv_rms where _launch_rows stores it (x's
    rows one stride apart or a copy's, a weight [hidden] of any dtype or none), else None (launch's layouts:
    N-D views, a weight per head; and anything launch refuses, which it names)."""
    try:
        ok = (DTYPE_NAMES.get(x.dtype) is not None and (device := x.get_device()) >= 0
              and device == driver.selected_device().ordinal and row_stride(x) is not None
              and vector_weight(weight, x.shape[-1], device))
    except (AttributeError, IndexError):  # not tensors, or a 0-d x: launch says which
        ok = False
    if not ok or (gemma and weight is None):
        return launch(x, weight, eps, gemma, round_once), None
    return _launch_rows(x, weight, eps, gemma, round_once, save_rstd=True)


def _explain(x, weight) -> None:
    """Raise the error that names why rms_norm's hot path turned these operands down (it knows only
    that it did)."""
    check_meta(x, {"weight": weight})
    check_device({"x": x, "weight": weight})
    raise AssertionError("unreachable: the operands passed every check")  # keeps a logic slip from launching


# --- the custom op --------------------------------------------------------------------------------------


@torch.library.custom_op("pyrms::rms_norm", mutates_args=())
def rms_norm_op(x: Tensor, weight: Optional[Tensor], eps: float, gemma: bool, round_once: bool) -> Tensor:
    return launch(x, weight, eps, gemma, round_once)


@rms_norm_op.register_fake
def _(x, weight, eps, gemma, round_once):
    check_meta(x, {"weight": weight}, mixed_vectors=("weight",), per_head=("weight",))
    return empty_rows_like(x, _out_dtype(x, weight, round_once))


def _save_rms_norm(ctx, inputs, output):
    x, weight, eps, gemma, _ = inputs  # round_once does not apply: the gradient is of the exact function
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.gemma = eps, gemma


def _rms_norm_grads(ctx, grad):
    x, weight = ctx.saved_tensors
    grad_input, grad_weight = _backward.rms_norm_backward_op(grad, x, weight, ctx.eps, ctx.gemma)
    return grad_input, None if weight is None else grad_weight, None, None, None


rms_norm_op.register_autograd(_rms_norm_grads, setup_context=_save_rms_norm)


# --- eager autograd: the same backward without the custom op's dispatch ------------------------------


class RmsNormFunction(torch.autograd.Function):
    """rms_norm's autograd for eager calls, which costs the host a fraction of a custom op's dispatch
    (about 8 against 40 µs per call, measured on the development machine with the launches stubbed)."""

    @staticmethod
    def forward(ctx, x, weight, eps, gemma, round_once):
        out, rstd = _forward_saving_rstd(x, weight, eps, gemma, round_once)
        ctx.save_for_backward(x, weight, rstd)  # rstd: the backward reads it instead of recomputing (same bits)
        ctx.eps, ctx.gemma = eps, gemma
        return out

    @staticmethod
    @once_differentiable  # pyrms's backward kernels have no backward: a second derivative raises
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        grad_input, grad_weight = _backward.launch(grad, x, weight, ctx.eps, ctx.gemma, rstd)
        return grad_input, None if weight is None else grad_weight, None, None, None


# --- the user function ----------------------------------------------------------------------------------

_RMS_NORM = torch.ops.pyrms.rms_norm.default


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *, gemma: bool = False,
             round_once: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``, fp32 inside.

    ``x``: a CUDA tensor [..., hidden] of bfloat16, float16 or float32; ``weight``: [hidden], contiguous
    (an ``nn.Parameter`` is fine), or None for no weight (``round(x * r)``, as
    ``torch.nn.RMSNorm(elementwise_affine=False)``; not with gemma), or one weight per head:
    [heads, head_dim] beside x [..., heads, head_dim] (each head's rows normalized with its weight row; its
    backward is one backward per head, bitwise what separate calls per head give). A weight of x's dtype gives an output of
    x's dtype. A weight of another dtype (fp32 master weights beside bf16 activations under
    ``torch.autocast``, the mixed-precision set-up of HF Trainer and Megatron) is read as float32 (bf16 and
    fp16 convert exactly), and the output's dtype is the formula's: with the default rounding, float32,
    the fp32 product of the rounded ``x_hat`` and the weight, unrounded (the dtypes' promotion in Hugging
    Face LLaMA's and Qwen's ``weight * x_hat.to(x.dtype)``); with ``round_once``, x's dtype (Gemma's
    ``(... * (1 + weight.float())).to(x.dtype)``). The weight's gradient is summed in float32 and returned in
    its dtype. Rows one stride apart (contiguous tensors, slices
    such as ``big[..., :hidden]``) are read in place, and so are views whose leading dimensions collapse
    to at most three with the hidden one contiguous (QK-norm's ``qkv[:, :h*d].view(t, h, d)``, a
    transposed ``[b, h, s, d]``: pyrms's N-D kernel); other layouts from a contiguous copy. Returns a new tensor shaped like x, rows contiguous.

    Rounding: by default ``(T)((T)(x * r) * weight)``, Hugging Face LLaMA's and Qwen's formula;
    ``round_once=True`` rounds only the fp32 product ``x * r * weight`` (PyTorch's fused kernel);
    ``gemma=True`` multiplies by ``1 + weight``, the addition in fp32 (Gemma's RMSNorm is
    ``gemma=True, round_once=True``). Differentiable once in x and weight (pyrms's backward kernels,
    the gradient of the exact function; dweight summed over rows in a fixed order, bitwise
    reproducible, in weight's dtype; without a weight the backward computes dx alone, in one launch).
    With eps = 0 an all-zero row gives NaN, as in PyTorch.

    ``bias``: RMSNorm with a bias, ``x / sqrt(mean(x**2, -1) + eps) * weight + bias`` (QuACK's), [hidden] of the
    weight's dtype (or x's without a weight): the same statistics, the expression rounded once (round_once is
    implied), through ``pyrms.layer_norm(..., rms=True)``; parameters of another dtype than x give a float32
    output, as ``layer_norm``'s do. Differentiable in the bias too (its gradient is the sum of the upstream
    gradient over rows, in the same fixed order). Not with gemma or a weight per head.

    Raises TypeError for unsupported dtypes, ValueError for CPU tensors, tensors
    on another device than pyrms's, or a weight of the wrong shape.
    """
    if bias is not None:
        if gemma or per_head(weight):
            raise ValueError("bias goes with a weight [hidden] or none, without gemma; got "
                             + ("gemma=True" if gemma else f"a weight per head of shape {tuple(weight.shape)}"))
        return _layer_norm.with_bias(x, weight, bias, eps, True)
    if torch.compiler.is_compiling() or _dispatch_modes():
        return _RMS_NORM(x, weight, float(eps), gemma, round_once)
    if _records(x, weight):
        return RmsNormFunction.apply(x, weight, eps, gemma, round_once)
    return launch(x, weight, eps, gemma, round_once)


# --- the module ------------------------------------------------------------------------------------


@swaps_in
class RMSNorm(nn.Module):
    """RMSNorm over the last dimension through ``pyrms.torch.rms_norm``; one parameter, ``weight``
    [hidden_size] (initialized to ones, or zeros with ``gemma=True``, where it scales by 1 + weight),
    so Hugging Face's RMSNorm state dicts load as they are. ``variance_epsilon`` is ``eps`` under
    Hugging Face's name. ``elementwise_affine=False``: no weight (``weight`` is None, the state dict
    empty), as ``torch.nn.RMSNorm(elementwise_affine=False)``; not with gemma. ``hidden_size`` may then be
    None (a norm of any size, as Gemma 4's weightless norms, which say none). ``bias=True``: a second parameter,
    ``bias`` [hidden_size] (zeros), added after the weight (``pyrms.torch.rms_norm``'s bias: rounded once); not
    with gemma.

    Hugging Face computes ``rsqrt`` with CUDA's approximate ``rsqrtf`` and sums the squares in another
    order than pyrms (which rounds every step correctly), so a few outputs in a million differ by one or
    two units in the last place: the same formula, not the same bits."""

    def __init__(self, hidden_size: int | None, eps: float = 1e-6, *, gemma: bool = False, round_once: bool = False,
                 elementwise_affine: bool = True, bias: bool = False, device=None, dtype: torch.dtype | None = None):
        super().__init__()
        if gemma and not elementwise_affine:
            raise ValueError("gemma scales by 1 + weight, so it needs a weight: elementwise_affine=False was given")
        if bias and (gemma or hidden_size is None):
            raise ValueError("bias=True needs hidden_size and goes without gemma; got "
                             + ("gemma=True" if gemma else "hidden_size=None"))
        if hidden_size is None and elementwise_affine:
            raise ValueError("hidden_size=None leaves the weight without a size: give hidden_size, or "
                             "elementwise_affine=False for a norm without weight")
        self.hidden_size = hidden_size
        self.eps = float(eps)
        self.gemma = bool(gemma)
        self.round_once = bool(round_once)
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:
            init = torch.zeros if gemma else torch.ones
            self.weight = nn.Parameter(init(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if bias:
            self.bias = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    @property
    def variance_epsilon(self) -> float:
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        self.eps = float(value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, gemma=self.gemma, round_once=self.round_once, bias=self.bias)

    def extra_repr(self) -> str:
        options = "".join(f", {name}=True" for name in ("gemma", "round_once") if getattr(self, name))
        affine = "" if self.elementwise_affine else ", elementwise_affine=False"
        bias = ", bias=True" if self.bias is not None else ""
        return f"{self.hidden_size}, eps={self.eps}{options}{affine}{bias}"

    @classmethod
    def from_module(cls, norm: nn.Module, *, gemma: bool | None = None, round_once: bool | None = None) -> "RMSNorm":
        """An RMSNorm computing what ``norm`` computes, sharing its weight Parameter (tied weights and
        optimizer state stay as they are): a Hugging Face RMSNorm, a ``torch.nn.RMSNorm``, or any module with
        a 1-D ``weight`` Parameter and ``variance_epsilon`` or ``eps``. ``gemma``/``round_once`` default to
        its formula's (``pyrms.model_norms``), and to False for a class pyrms knows no formula for. TypeError,
        with the reason, for a module pyrms cannot take over this way."""
        found = decide(facts(norm), assume={})
        if not isinstance(found, Swap) or found.module != "RMSNorm":
            reason = found.reason if isinstance(found, Keep) else f"it is a torch.nn.{found.module}"
            raise TypeError(f"{type(norm).__name__} is not an RMSNorm that pyrms can take over: {reason}")
        return cls.taking_over(norm, found, gemma, round_once)

    @classmethod
    def taking_over(cls, norm: nn.Module, swap: Swap, gemma: bool | None = None,
                    round_once: bool | None = None) -> "RMSNorm":
        """The RMSNorm that ``swap`` (pyrms.model_norms' decision on ``norm``) puts in ``norm``'s place, sharing
        its weight Parameter; ``gemma``/``round_once`` override the decision's."""
        module = cls(swap.hidden, swap.eps, gemma=swap.gemma if gemma is None else gemma,
                     round_once=swap.round_once if round_once is None else round_once,
                     elementwise_affine=swap.weighted, device="meta")
        if swap.weighted:
            module.weight = norm.weight
        module.train(norm.training)
        return module

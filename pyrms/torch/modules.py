"""``RMSNorm`` and ``LayerNorm`` modules over pyrms's kernels, state-dict compatible with Hugging Face's
RMSNorm modules and ``torch.nn.LayerNorm``, and ``replace_norms``, which swaps those in a model.

Hugging Face formulas (read from transformers' modeling files), and the options that compute them:

- LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm: ``weight * (x.float() * rsqrt(mean(x²) +
  eps)).to(dtype)``: pyrms's default rounding (the normalized value rounded, then times weight).
- GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm: ``(x.float() * rsqrt(...) * (1 + weight.float())).to(dtype)``:
  ``gemma=True, round_once=True``.

Hugging Face computes ``rsqrt`` with CUDA's approximate ``rsqrtf`` and sums the squares in another
order than pyrms (which rounds every step correctly), so a few outputs in 10^5 differ by one unit
in the last place: the same formula, not the same bits.
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops.layer_norm.torch_binding import layer_norm
from ..ops.rms_norm.torch_binding import rms_norm

# Hugging Face RMSNorm classes by name (transformers is not imported), with the options matching each.
HF_RMS_NORMS = {
    "LlamaRMSNorm": {}, "MistralRMSNorm": {}, "Qwen2RMSNorm": {}, "Qwen3RMSNorm": {},
    "GemmaRMSNorm": {"gemma": True, "round_once": True}, "Gemma2RMSNorm": {"gemma": True, "round_once": True},
    "Gemma3RMSNorm": {"gemma": True, "round_once": True},
}


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension through ``pyrms.torch.rms_norm``; one parameter, ``weight``
    [hidden_size] (initialized to ones, or zeros with ``gemma=True``, where it scales by 1 + weight),
    so Hugging Face's RMSNorm state dicts load as they are. ``variance_epsilon`` is ``eps`` under
    Hugging Face's name. ``elementwise_affine=False``: no weight (``weight`` is None, the state dict
    empty), as ``torch.nn.RMSNorm(elementwise_affine=False)``; not with gemma."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, gemma: bool = False, round_once: bool = False,
                 elementwise_affine: bool = True, device=None, dtype: torch.dtype | None = None):
        super().__init__()
        if gemma and not elementwise_affine:
            raise ValueError("gemma scales by 1 + weight, so it needs a weight: elementwise_affine=False was given")
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

    @property
    def variance_epsilon(self) -> float:
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        self.eps = float(value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, gemma=self.gemma, round_once=self.round_once)

    def extra_repr(self) -> str:
        options = "".join(f", {name}=True" for name in ("gemma", "round_once") if getattr(self, name))
        affine = "" if self.elementwise_affine else ", elementwise_affine=False"
        return f"{self.hidden_size}, eps={self.eps}{options}{affine}"

    @classmethod
    def from_module(cls, norm: nn.Module, *, gemma: bool | None = None, round_once: bool | None = None) -> "RMSNorm":
        """An RMSNorm computing what ``norm`` (a Hugging Face RMSNorm, or any module with a 1-D
        ``weight`` Parameter and ``variance_epsilon`` or ``eps``) computes, sharing that Parameter (tied
        weights and optimizer state stay as they are). ``gemma``/``round_once`` default to the
        options HF_RMS_NORMS lists for its class, else to False."""
        options = HF_RMS_NORMS.get(type(norm).__name__, {})
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        weight = getattr(norm, "weight", None)
        if eps is None or not isinstance(weight, nn.Parameter) or weight.dim() != 1:
            raise TypeError(f"{type(norm).__name__} is not an RMSNorm that pyrms can take over: it needs a 1-D "
                            "weight Parameter and a variance_epsilon or eps attribute")
        module = cls(weight.shape[0], eps, gemma=options.get("gemma", False) if gemma is None else gemma,
                     round_once=options.get("round_once", False) if round_once is None else round_once, device="meta")
        module.weight = weight
        module.train(norm.training)
        return module


class LayerNorm(nn.Module):
    """``torch.nn.LayerNorm`` over the last dimension through ``pyrms.torch.layer_norm``: the same
    arguments, attributes (``normalized_shape``, ``eps``, ``elementwise_affine``) and state dict
    (``weight`` and ``bias``: ``bias`` not with ``bias=False``, neither with
    ``elementwise_affine=False``). NotImplementedError for a normalized_shape of more than one
    dimension, which pyrms has no kernel for."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype: torch.dtype | None = None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1:
            raise NotImplementedError(f"pyrms normalizes over the last dimension only; normalized_shape={shape}")
        self.normalized_shape = shape
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:  # as torch.nn.LayerNorm: without it, no bias either
            self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if self.elementwise_affine and bias:
            self.bias = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")

    @classmethod
    def from_module(cls, norm: nn.LayerNorm) -> "LayerNorm":
        """A LayerNorm computing what ``norm`` (an ``nn.LayerNorm``) computes, sharing its Parameters."""
        module = cls(norm.normalized_shape, norm.eps, norm.elementwise_affine, norm.bias is not None, device="meta")
        if norm.weight is not None:
            module.weight = norm.weight
        if norm.bias is not None:
            module.bias = norm.bias
        module.train(norm.training)
        return module


def _replacement(module: nn.Module) -> nn.Module | None:
    """pyrms's module for ``module``, or None where there is none to swap in."""
    if type(module).__name__ in HF_RMS_NORMS:
        return RMSNorm.from_module(module)
    # The exact class: a subclass of nn.LayerNorm may compute something else (say, in fp32).
    if type(module) is nn.LayerNorm and len(module.normalized_shape) == 1:
        return LayerNorm.from_module(module)
    return None


def replace_norms(model: nn.Module) -> nn.Module:
    """Swap, in place, every Hugging Face RMSNorm listed in HF_RMS_NORMS and every ``nn.LayerNorm``
    (the class itself, not subclasses) inside ``model`` for pyrms's RMSNorm/LayerNorm, which share their Parameters. Returns ``model``,
    or the replacement when ``model`` is itself such a norm.

    ``nn.LayerNorm``s over several dimensions stay as they are (pyrms has no kernel for them). Works as ``replace_norms(model)`` or as ``model.apply(replace_norms)``.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = _replacement(child)
            if new is not None:
                setattr(parent, name, new)
    replacement = _replacement(model)
    return model if replacement is None else replacement

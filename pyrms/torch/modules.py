"""``RMSNorm`` and ``LayerNorm`` modules over pyrms's kernels, state-dict compatible with Hugging Face's
RMSNorm modules, ``torch.nn.RMSNorm`` and ``torch.nn.LayerNorm``, and ``replace_norms``, which swaps those in
a model and reports what it swapped and what it kept. Which classes it takes, and as which options:
``pyrms/model_norms.py`` (torch-free), from what ``_facts`` reads off each module.

Hugging Face computes ``rsqrt`` with CUDA's approximate ``rsqrtf`` and sums the squares in another
order than pyrms (which rounds every step correctly), so a few outputs in a million differ by one or
two units in the last place: the same formula, not the same bits.
"""
from __future__ import annotations

import torch
from torch import nn

from ..model_norms import Facts, Keep, Kept, NormReport, Swap, Swapped, decide
from ..ops.layer_norm.torch_binding import layer_norm
from ..ops.rms_norm.torch_binding import rms_norm


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension through ``pyrms.torch.rms_norm``; one parameter, ``weight``
    [hidden_size] (initialized to ones, or zeros with ``gemma=True``, where it scales by 1 + weight),
    so Hugging Face's RMSNorm state dicts load as they are. ``variance_epsilon`` is ``eps`` under
    Hugging Face's name. ``elementwise_affine=False``: no weight (``weight`` is None, the state dict
    empty), as ``torch.nn.RMSNorm(elementwise_affine=False)``; not with gemma. ``hidden_size`` may then be
    None (a norm of any size, as Gemma 4's weightless norms, which say none). ``bias=True``: a second parameter,
    ``bias`` [hidden_size] (zeros), added after the weight (``pyrms.torch.rms_norm``'s bias: rounded once); not
    with gemma."""

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
        found = decide(_facts(norm), assume={})
        if not isinstance(found, Swap) or found.module != "RMSNorm":
            reason = found.reason if isinstance(found, Keep) else f"it is a torch.nn.{found.module}"
            raise TypeError(f"{type(norm).__name__} is not an RMSNorm that pyrms can take over: {reason}")
        return cls._taking_over(norm, found, gemma, round_once)

    @classmethod
    def _taking_over(cls, norm: nn.Module, swap: Swap, gemma: bool | None = None,
                     round_once: bool | None = None) -> "RMSNorm":
        module = cls(swap.hidden, swap.eps, gemma=swap.gemma if gemma is None else gemma,
                     round_once=swap.round_once if round_once is None else round_once,
                     elementwise_affine=swap.weighted, device="meta")
        if swap.weighted:
            module.weight = norm.weight
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


def _facts(module: nn.Module) -> Facts:
    """What pyrms.model_norms decides from: the module's class and the attributes the norms it knows keep."""
    base = next((b for b in (nn.RMSNorm, nn.LayerNorm) if isinstance(module, b)), None)
    weight = getattr(module, "weight", None)
    shape = getattr(module, "normalized_shape", None)
    return Facts(type(module).__name__, None if base is None else base.__name__, type(module) is base,
                 tuple(weight.shape) if isinstance(weight, nn.Parameter) else None,
                 getattr(module, "variance_epsilon", getattr(module, "eps", None)),
                 None if shape is None else tuple(shape), bool(getattr(module, "with_scale", True)),
                 "forward" in vars(module))


def replace_norms(model: nn.Module) -> NormReport:
    """Swap, in place, every norm inside ``model`` that pyrms computes for pyrms.torch's ``RMSNorm`` or
    ``LayerNorm``, which share its Parameters: the Hugging Face RMSNorms of ``HF_RMS_NORMS`` (the families
    Liger-Kernel patches: LLaMA, Mistral, Qwen 2 and 3, Gemma 1 to 4, OLMo, GPT-OSS, Phi-3, GLM-4, ...),
    ``torch.nn.RMSNorm`` and ``torch.nn.LayerNorm`` (those classes themselves, not subclasses), each with the
    options that compute its formula (``pyrms.model_norms``). A norm shared by several parents gets one
    replacement.

    Returns a ``NormReport``: ``report.model`` is ``model``, or the replacement when ``model`` is itself such
    a norm; ``report.swapped`` and ``report.kept`` list the norms swapped and those left in place with the
    reason (norms over several dimensions, gated norms, subclasses, instances whose forward was replaced,
    classes pyrms knows no formula for); ``print(report)`` summarizes them. Nothing is printed or logged.
    ``model.apply(replace_norms)`` swaps the same norms, and drops the reports.
    """
    swapped, kept = [], []
    done: dict[int, nn.Module | None] = {}  # id(norm) -> its replacement (None: kept), for shared norms

    def replacement(path: str, module: nn.Module) -> nn.Module | None:
        if id(module) not in done:
            found = None if isinstance(module, (RMSNorm, LayerNorm)) else decide(_facts(module))
            new = None
            if isinstance(found, Keep):
                kept.append(Kept(path, type(module).__name__, found.reason))
            elif found is not None:
                new = (LayerNorm.from_module(module) if found.module == "LayerNorm"
                       else RMSNorm._taking_over(module, found))
                swapped.append(Swapped(path, type(module).__name__, repr(new)))
            done[id(module)] = new
        return done[id(module)]

    top = model
    for path, module in list(model.named_modules(remove_duplicate=False)):  # each place of a shared norm too
        new = replacement(path, module)
        if new is not None and path:
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, new)
        elif new is not None:
            top = new
    return NormReport(top, tuple(swapped), tuple(kept))

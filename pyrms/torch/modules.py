"""pyrms.torch's modules and ``replace_norms``, which swaps the norms of a model for them (Hugging Face's
RMSNorm modules, ``torch.nn.RMSNorm``, ``torch.nn.LayerNorm``) and reports what it swapped and what it kept.
Each module sits beside its op's PyTorch binding, in its op's folder, and says so with ``swaps_in``. Which
classes replace_norms takes, and as which options: ``pyrms/model_norms.py`` (torch-free), from what ``facts``
reads off each module.
"""
from __future__ import annotations

from torch import nn

from ..model_norms import Facts, Keep, Kept, NormReport, Swapped, decide

# pyrms.torch's modules that replace_norms puts in a norm's place, by class name (the name pyrms.model_norms
# decides, Swap.module): each registers itself with swaps_in.
_SWAPS_IN: dict[str, type[nn.Module]] = {}


def swaps_in(cls: type[nn.Module]) -> type[nn.Module]:
    """Class decorator: ``cls`` is the module replace_norms swaps in where pyrms.model_norms decides a
    ``Swap(cls.__name__)``, built by ``cls.taking_over(norm, swap)``."""
    _SWAPS_IN[cls.__name__] = cls
    return cls


def facts(module: nn.Module) -> Facts:
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
            found = None if isinstance(module, tuple(_SWAPS_IN.values())) else decide(facts(module))
            new = None
            if isinstance(found, Keep):
                kept.append(Kept(path, type(module).__name__, found.reason))
            elif found is not None:
                new = _SWAPS_IN[found.module].taking_over(module, found)
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

"""Which norm modules of model code ``pyrms.torch.replace_norms`` takes over, as which pyrms options, and
the report of what it swapped and what it kept. Torch-free: it decides from what pyrms.torch reads off a
module (its class name and a few attributes, ``Facts``), so every decision is tested without PyTorch.

The Hugging Face classes are the RMSNorms of the model families Liger-Kernel patches (its
``transformers/monkey_patch.py``), each with the formula read from transformers' modeling file rather than
from Liger's casting mode (Liger runs OLMo 2's and GPT-OSS's norms in its "llama" mode, which rounds where
transformers does not). With ``r = 1 / sqrt(mean(x²) + eps)`` in fp32:

- ``LLAMA``, ``weight * (x * r).to(x.dtype)``: pyrms's default rounding.
- ``ROUND_ONCE``, ``(x * r * weight).to(x.dtype)``: ``round_once=True``. OLMo 2 and 3, GPT-OSS, Gemma 3n
  and 4 (their ``with_scale=False`` norms have no weight: ``(x * r).to(x.dtype)``), and ``torch.nn.RMSNorm``
  (its fused CUDA kernel, and its composite path, which a weight of another dtype than x takes).
- ``GEMMA``, ``(x * r * (1 + weight.float())).to(x.dtype)``: ``gemma=True, round_once=True``. Gemma 1 to 3,
  Qwen3-Next, Qwen3.5.

Left alone, each with its reason in the report: gated norms (``Qwen3NextRMSNormGated``,
``FalconH1RMSNormGated``), unweighted ones that are not RMSNorms of these (``Llama4TextL2Norm``),
``NemotronLayerNorm1P`` (a LayerNorm scaled by 1 + weight, which Liger does not take either), subclasses of
``torch.nn.LayerNorm``/``RMSNorm`` (they may compute otherwise), norms over several dimensions, and any
instance whose ``forward`` was replaced (Liger's patches do that: its class no longer says what it computes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

LLAMA = MappingProxyType({})
ROUND_ONCE = MappingProxyType({"round_once": True})
GEMMA = MappingProxyType({"gemma": True, "round_once": True})

_LLAMA_CLASSES = (
    "LlamaRMSNorm", "Llama4TextRMSNorm", "MllamaTextRMSNorm", "MistralRMSNorm", "MinistralRMSNorm",
    "MixtralRMSNorm", "PixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Qwen3VLTextRMSNorm",
    "Qwen3VLMoeTextRMSNorm", "Phi3RMSNorm", "GraniteRMSNorm", "SmolLM3RMSNorm", "Glm4RMSNorm", "Glm4vRMSNorm",
    "Glm4vMoeRMSNorm", "Glm4vMoeTextRMSNorm", "InternVLVisionRMSNorm", "FalconH1RMSNorm", "HunYuanDenseV1RMSNorm",
    "HunYuanMoEV1RMSNorm", "DeepseekV4RMSNorm", "Exaone4RMSNorm",
)
_ROUND_ONCE_CLASSES = ("Olmo2RMSNorm", "Olmo3RMSNorm", "GptOssRMSNorm", "Gemma3nRMSNorm", "Gemma4RMSNorm")
_GEMMA_CLASSES = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "Qwen3NextRMSNorm", "Qwen3_5RMSNorm",
                  "Qwen3_5MoeRMSNorm")

# Hugging Face RMSNorm classes by name (transformers is never imported) -> pyrms.torch.RMSNorm's options
# computing their formula. Add a model's own class here to have replace_norms take it over.
HF_RMS_NORMS: dict = {**dict.fromkeys(_LLAMA_CLASSES, LLAMA), **dict.fromkeys(_ROUND_ONCE_CLASSES, ROUND_ONCE),
                      **dict.fromkeys(_GEMMA_CLASSES, GEMMA)}

# torch.nn.RMSNorm's eps=None: PyTorch resolves it to the epsilon of the type it computes in, float32 for
# bf16, fp16 and fp32 inputs alike (FLT_EPSILON; its documentation says finfo(x.dtype).eps).
TORCH_DEFAULT_EPS = 2.0 ** -23


@dataclass(frozen=True)
class Facts:
    """What replace_norms reads off a module: its class name; ``torch_norm``, "RMSNorm" or "LayerNorm"
    where it is an instance of that torch.nn class, and ``exact`` when its class is that one itself; the
    shape of its ``weight`` Parameter (None without one); its ``variance_epsilon``, else ``eps``; its
    ``normalized_shape``; Gemma 3n/4's ``with_scale``; and whether ``forward`` was set on the instance."""

    class_name: str
    torch_norm: str | None = None
    exact: bool = False
    weight: tuple[int, ...] | None = None
    eps: object = None
    normalized_shape: tuple[int, ...] | None = None
    with_scale: bool = True
    forward_replaced: bool = False


@dataclass(frozen=True)
class Swap:
    """pyrms.torch's module to put in a norm's place: "LayerNorm" (built from the norm's own attributes) or
    "RMSNorm" with these arguments (``hidden`` None for a norm without weight that says no size)."""

    module: str
    hidden: int | None = None
    eps: float | None = None
    gemma: bool = False
    round_once: bool = False
    weighted: bool = True


@dataclass(frozen=True)
class Keep:
    """A norm replace_norms leaves in place, and why."""

    reason: str


def decide(facts: Facts, assume=None) -> Swap | Keep | None:
    """What replace_norms does with a module: a Swap, a Keep (a norm pyrms does not take, with the reason),
    or None for a module that is no norm. ``assume``: the options of a class HF_RMS_NORMS does not list,
    to take it as an RMSNorm with them (``RMSNorm.from_module``); None to keep such a class."""
    name, torch_norm = facts.class_name, facts.torch_norm
    options = HF_RMS_NORMS.get(name, assume)
    if torch_norm is None and options is None:
        return Keep(f"pyrms knows no formula for {name}") if _named_like_a_norm(name) else None
    if facts.forward_replaced:
        return Keep("its forward was replaced on the instance (as Liger-Kernel's patches do), so its class does "
                    "not say what it computes")
    if torch_norm is not None and not facts.exact:
        return Keep(f"a subclass of torch.nn.{torch_norm}, which may compute something else")
    if torch_norm is not None and len(facts.normalized_shape) != 1:
        return Keep(f"it normalizes over its last {len(facts.normalized_shape)} dimensions "
                    f"{facts.normalized_shape}; pyrms over the last one only")
    if torch_norm == "LayerNorm":
        return Swap("LayerNorm")
    if torch_norm == "RMSNorm":
        eps = TORCH_DEFAULT_EPS if facts.eps is None else facts.eps
        return _rms_norm(facts.normalized_shape[0], eps, ROUND_ONCE, facts.weight is not None)
    if not facts.with_scale:
        return _rms_norm(None, facts.eps, options, False)
    if facts.weight is None:
        return Keep("it has no weight Parameter")
    if len(facts.weight) != 1:
        return Keep(f"its weight Parameter has shape {facts.weight}, not (hidden_size,)")
    return _rms_norm(facts.weight[0], facts.eps, options, True)


def _rms_norm(hidden: int | None, eps, options, weighted: bool) -> Swap | Keep:
    if eps is None:
        return Keep("it has no variance_epsilon or eps attribute")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps >= 0):
        return Keep(f"its eps {eps!r} is not a finite number >= 0")
    return Swap("RMSNorm", hidden, float(eps), options.get("gemma", False), options.get("round_once", False),
                weighted)


def _named_like_a_norm(name: str) -> bool:
    """A class whose name says it normalizes: worth a line in the report when it stays."""
    return "RMSNorm" in name or "LayerNorm" in name or name.endswith("Norm")


@dataclass(frozen=True)
class Swapped:
    """A norm replace_norms swapped: where it was (``path`` as ``named_modules`` spells it, "" for the
    model itself), its class, and the module put in its place (as ``repr`` shows it)."""

    path: str
    was: str
    now: str


@dataclass(frozen=True)
class Kept:
    """A norm replace_norms left in place: where, its class, and why."""

    path: str
    class_name: str
    reason: str


@dataclass(frozen=True)
class NormReport:
    """What replace_norms did: ``model`` (the model, or the replacement when it was itself a norm), the norms
    ``swapped`` and those ``kept``; ``str()`` is a summary to print or log."""

    model: object
    swapped: tuple[Swapped, ...]
    kept: tuple[Kept, ...]

    def __str__(self) -> str:
        groups: dict[tuple[str, str], int] = {}
        for s in self.swapped:
            groups[(s.was, s.now)] = groups.get((s.was, s.now), 0) + 1
        lines = [f"replace_norms swapped {len(self.swapped)} norm{'' if len(self.swapped) == 1 else 's'}, "
                 f"kept {len(self.kept)}" + (":" if self.swapped or self.kept else "")]
        lines += [f"  {count} x {was} -> {now}" for (was, now), count in groups.items()]
        if self.kept:
            lines.append("kept:")
            lines += [f"  {k.path or '(the model)'} ({k.class_name}): {k.reason}" for k in self.kept]
        return "\n".join(lines)

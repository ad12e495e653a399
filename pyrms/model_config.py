"""The RMSNorm calls a Hugging Face model makes, read from its ``config.json`` without transformers or torch:
what ``python -m pyrms.precompile --model CONFIG.json`` compiles.

From the config: ``model_type`` (a multimodal config's ``text_config`` where it has one) picks the family's
RMSNorm class and so its formula (``pyrms.model_norms.HF_RMS_NORMS``); ``hidden_size``; ``head_dim``, else
``hidden_size // num_attention_heads``; ``torch_dtype`` (``dtype`` in newer configs). The families whose
attention normalizes queries and keys (QK-norm) do so per head, over ``head_dim`` (Qwen3, Gemma 3, ...), or
over all heads at once (OLMo 2 and 3: ``num_attention_heads`` and ``num_key_value_heads`` times ``head_dim``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from . import dtypes
from .model_norms import HF_RMS_NORMS
from .ops import registry

# RMSNorm classes of the families whose attention normalizes q and k per head (q_norm, k_norm over head_dim)...
QK_PER_HEAD = frozenset({"Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Qwen3NextRMSNorm", "Qwen3VLTextRMSNorm",
                         "Qwen3VLMoeTextRMSNorm", "Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm", "Gemma3RMSNorm",
                         "Gemma3nRMSNorm", "Exaone4RMSNorm"})
# ... and over every head at once (q over num_attention_heads, k over num_key_value_heads times head_dim).
QK_ALL_HEADS = frozenset({"Olmo2RMSNorm", "Olmo3RMSNorm"})


@dataclass(frozen=True)
class ModelNorms:
    """A model's RMSNorms: the family's class, its options for pyrms (``gemma``, ``round_once``), the rows'
    dtype, and every row width normalized: the hidden size first, then QK-norm's widths."""

    class_name: str
    options: Mapping[str, bool]
    dtype: dtypes.DType | None
    widths: tuple[int, ...]


def _key(name: str) -> str:
    return name.replace("_", "").lower()


def _class_of(model_type: str) -> str:
    """The family's RMSNorm class: the one named like model_type ("qwen3_moe" -> Qwen3MoeRMSNorm, "gemma3_text"
    -> Gemma3RMSNorm, "qwen3_vl" -> Qwen3VLTextRMSNorm); ValueError naming those pyrms knows."""
    known = {_key(name.removesuffix("RMSNorm")): name for name in HF_RMS_NORMS}
    key = _key(model_type)
    for candidate in (key, key.removesuffix("text"), key + "text"):
        if candidate in known:
            return known[candidate]
    raise ValueError(f"model_type {model_type!r}: pyrms knows the RMSNorm of these families only: "
                     f"{', '.join(sorted(known))}; give --ops and --dtypes instead")


def _positive(config: Mapping, name: str, path) -> int:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: {name} must be a positive integer, got {value!r}")
    return value


def read(path: str | Path) -> ModelNorms:
    """The RMSNorms of the model whose ``config.json`` is at ``path``; ValueError for a file that is not such a
    config (naming the field and its value) or a family pyrms has no formula for."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"cannot read {path} as a config.json: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a config.json holds a JSON object, got {type(config).__name__}")
    text = config.get("text_config")
    if isinstance(text, dict) and "hidden_size" in text:
        config = {**config, **text}
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"{path}: no model_type (got {model_type!r})")
    class_name = _class_of(model_type)
    hidden = _positive(config, "hidden_size", path)
    widths = [hidden]
    if class_name in QK_PER_HEAD | QK_ALL_HEADS:
        heads = _positive(config, "num_attention_heads", path)
        head_dim = _positive(config, "head_dim", path) if config.get("head_dim") is not None else hidden // heads
        if class_name in QK_PER_HEAD:
            widths.append(head_dim)
        else:
            kv_heads = _positive(config, "num_key_value_heads", path) if "num_key_value_heads" in config else heads
            widths += [heads * head_dim, kv_heads * head_dim]
    name = config.get("torch_dtype", config.get("dtype"))
    try:
        dtype = None if name is None else dtypes.get(name)
    except (ValueError, TypeError):
        raise ValueError(f"{path}: torch_dtype {name!r} is not one pyrms runs; allowed: bfloat16, float16, float32 "
                         "(or give --dtypes)") from None
    return ModelNorms(class_name, MappingProxyType(dict(HF_RMS_NORMS[class_name])), dtype,
                      tuple(dict.fromkeys(widths)))


def norm_calls(model: ModelNorms, dtype: dtypes.DType, training: bool = False) -> list[tuple[str, int, dict]]:
    """(op, row width, options) of every pyrms call the model's norms make in ``dtype``, in the registry's order:
    each op's own answer (``OpSpec.model_calls``: the norm at each width, the residual add fused in at the
    hidden size, and with ``training`` the backward at each width), the weight in the rows' dtype and, in
    training beside bf16/fp16 rows, in float32 too (mixed precision keeps fp32 parameters)."""
    weights = [None, "float32"] if training and dtype.itemsize == 2 else [None]
    return [(spec.name, width, options) for spec in registry.REGISTRY.values() if spec.model_calls is not None
            for width, options in spec.model_calls(model.widths, model.options, weights, training)]

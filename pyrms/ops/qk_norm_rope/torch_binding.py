"""qk_norm_rope for PyTorch: the custom ops ``torch.ops.pyrms.qk_norm_rope`` (in place on qkv) and
``torch.ops.pyrms.qk_norm_rope_kv_cache`` (in place on qkv and the paged KV caches; their fakes check dtypes and
shapes only), their eager launch on torch tensors, and the user function ``pyrms.torch.qk_norm_rope``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.qk_norm_rope(qkv!, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads,
                                 head_dim, rotary_dim, is_neox, eps, gemma) -> ()
    torch.ops.pyrms.qk_norm_rope_kv_cache(<the same>, key_cache!, value_cache!, slot_mapping, kv_cache_dtype,
                                          k_scale?, v_scale?, k_scale_value, v_scale_value) -> ()

Two ops, not one with optional caches: a mutated argument that may be None (or left to its default) breaks
torch's in-place bookkeeping under torch.compile (the ADInplaceOrView kernel indexes the arguments given).
A scale is a one-element float32 tensor (vLLM's layer._k_scale: the kernel reads it) or, where that is None, the
float beside it.

No autograd (vLLM's op has none either): an inference op. No ``from __future__ import annotations`` here: torch
infers the op's schema from the annotations as objects.
"""
from typing import Optional

import torch
from torch import Tensor

from ...torch._layout import check_device, current_stream
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import increment_version as _increment_version
from ...torch._routing import records as _records
from .op import _unused_kv
from .op import qk_norm_rope as _qk_norm_rope

__all__ = ["qk_norm_rope"]

_FLOAT = (torch.bfloat16, torch.float16, torch.float32)


def launch(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor,
           num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int, is_neox: bool, eps: float,
           gemma: bool, key_cache: Optional[Tensor] = None, value_cache: Optional[Tensor] = None,
           slot_mapping: Optional[Tensor] = None, kv_cache_dtype: str = "auto", k_scale: Optional[Tensor] = None,
           v_scale: Optional[Tensor] = None, k_scale_value: float = 1.0, v_scale_value: float = 1.0) -> None:
    """In place on qkv's q and k heads and the caches (see pyrms.torch.qk_norm_rope), on torch's current stream:
    pyrms's array path reads the tensors (and names a bad one)."""
    device = check_device({"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight, "cos_sin_cache": cos_sin_cache,
                           "positions": positions, "key_cache": key_cache, "value_cache": value_cache,
                           "slot_mapping": slot_mapping, "k_scale": k_scale, "v_scale": v_scale})
    plain = (key_cache is None and value_cache is None and slot_mapping is None and k_scale is None
             and v_scale is None and kv_cache_dtype == "auto" and k_scale_value == 1.0 and v_scale_value == 1.0)
    kv = {} if plain else dict(  # without a cache, the op's own defaults (anything else: refused by name there)
        key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping, kv_cache_dtype=kv_cache_dtype,
        k_scale=k_scale_value if k_scale is None else k_scale, v_scale=v_scale_value if v_scale is None else v_scale)
    _qk_norm_rope(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads=num_q_heads,
                  num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim, is_neox=is_neox,
                  epsilon=float(eps), gemma=gemma, stream=current_stream(device), **kv)


@torch.library.custom_op("pyrms::qk_norm_rope", mutates_args=("qkv",))
def qk_norm_rope_op(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor,
                    num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int, is_neox: bool, eps: float,
                    gemma: bool) -> None:
    launch(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim,
           is_neox, eps, gemma)


@qk_norm_rope_op.register_fake
def _(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim, is_neox,
      eps, gemma):
    _check_meta(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim)


@torch.library.custom_op("pyrms::qk_norm_rope_kv_cache", mutates_args=("qkv", "key_cache", "value_cache"))
def qk_norm_rope_kv_cache_op(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor,
                             positions: Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int,
                             is_neox: bool, eps: float, gemma: bool, key_cache: Tensor, value_cache: Tensor,
                             slot_mapping: Tensor, kv_cache_dtype: str, k_scale: Optional[Tensor],
                             v_scale: Optional[Tensor], k_scale_value: float, v_scale_value: float) -> None:
    launch(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim,
           is_neox, eps, gemma, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, k_scale_value,
           v_scale_value)


@qk_norm_rope_kv_cache_op.register_fake
def _(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim, is_neox,
      eps, gemma, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale, k_scale_value,
      v_scale_value):
    _check_meta(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rotary_dim)
    _check_cache_meta(qkv, key_cache, value_cache, slot_mapping, num_kv_heads, head_dim, kv_cache_dtype)


def _check_meta(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim,
                rotary_dim) -> None:
    """What needs no data: dtypes and shapes (the launch checks the rest)."""
    width = (num_q_heads + 2 * num_kv_heads) * head_dim
    if qkv.dtype not in _FLOAT or qkv.dim() not in (2, 3) or qkv.shape[1:].numel() != width:
        raise ValueError(f"qkv must be a bfloat16, float16 or float32 [tokens, {width}] or [tokens, "
                         f"{num_q_heads + 2 * num_kv_heads}, {head_dim}] tensor, got {qkv.dtype} {tuple(qkv.shape)}")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if w.dtype != qkv.dtype or tuple(w.shape) != (head_dim,):
            raise ValueError(f"{name} must be a [{head_dim}] tensor of qkv's dtype {qkv.dtype}, got {w.dtype} "
                             f"{tuple(w.shape)}")
    if cos_sin_cache.dtype != torch.float32 or cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rotary_dim:
        raise ValueError(f"cos_sin_cache must be a float32 [max_position, {rotary_dim}] tensor, got "
                         f"{cos_sin_cache.dtype} {tuple(cos_sin_cache.shape)}")
    if positions.dtype != torch.int64 or tuple(positions.shape) != (qkv.shape[0],):
        raise ValueError(f"positions must be an int64 [{qkv.shape[0]}] tensor, got {positions.dtype} "
                         f"{tuple(positions.shape)}")


def _check_cache_meta(qkv, key_cache, value_cache, slot_mapping, num_kv_heads, head_dim, kv_cache_dtype) -> None:
    """The caches' dtypes and shapes, and slot_mapping's (the launch checks the rest)."""
    element = (qkv.dtype,) if kv_cache_dtype == "auto" else (torch.float8_e4m3fn, torch.uint8)
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        if cache.dtype not in element or cache.dim() != 4 or tuple(cache.shape[2:]) != (num_kv_heads, head_dim):
            raise ValueError(f"{name} must be a [num_blocks, block_size, {num_kv_heads}, {head_dim}] tensor of "
                             f"{' or '.join(map(str, element))} (kv_cache_dtype {kv_cache_dtype!r}), got "
                             f"{cache.dtype} {tuple(cache.shape)}")
    if slot_mapping.dtype != torch.int64 or tuple(slot_mapping.shape) != (qkv.shape[0],):
        raise ValueError(f"slot_mapping must be an int64 [{qkv.shape[0]}] tensor, got {slot_mapping.dtype} "
                         f"{tuple(slot_mapping.shape)}")


_QK_NORM_ROPE = torch.ops.pyrms.qk_norm_rope.default
_QK_NORM_ROPE_KV_CACHE = torch.ops.pyrms.qk_norm_rope_kv_cache.default


def qk_norm_rope(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor, *,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int | None = None,
                 is_neox: bool = True, eps: float = 1e-6, gemma: bool = False, key_cache: Tensor | None = None,
                 value_cache: Tensor | None = None, slot_mapping: Tensor | None = None, kv_cache_dtype: str = "auto",
                 k_scale: float | Tensor = 1.0, v_scale: float | Tensor = 1.0) -> None:
    """vLLM's ``fused_qk_norm_rope`` on torch tensors, in place on qkv's q and k heads, and with ``key_cache``,
    ``value_cache`` and ``slot_mapping`` its ``reshape_and_cache_flash`` of the k and v after it:
    ``pyrms.qk_norm_rope`` (its docstring says the arithmetic, the rounding and the caches' layout), on torch's
    current stream. Returns None.

    ``qkv``: a CUDA [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] or [tokens, heads, head_dim] tensor,
    contiguous inside each token (a row slice of a wider buffer works in place); ``q_weight``, ``k_weight``:
    [head_dim] of its dtype; ``cos_sin_cache``: float32 [max_position, rotary_dim] (``rotary_dim`` defaults to its
    second dimension); ``positions``: int64 [tokens]. The caches: [num_blocks, block_size, num_kv_heads, head_dim]
    of qkv's dtype (``kv_cache_dtype='auto'``) or, with 'fp8' / 'fp8_e4m3', torch.float8_e4m3fn or torch.uint8
    (vLLM's fp8 storage), any block, page and head strides, both of one layout; ``slot_mapping``: int64 [tokens],
    -1 for a padding token; ``k_scale``, ``v_scale``: floats or one-element float32 tensors (vLLM's
    layer._k_scale and _v_scale, read by the kernel). No autograd: call it under ``torch.no_grad()`` or
    ``torch.inference_mode()`` (RuntimeError when autograd would have to record it). Under torch.compile it is
    the custom op ``torch.ops.pyrms.qk_norm_rope`` (mutating qkv), or with the caches
    ``torch.ops.pyrms.qk_norm_rope_kv_cache`` (mutating qkv and both caches).
    """
    rot = cos_sin_cache.shape[-1] if rotary_dim is None else rotary_dim
    args = (qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rot, is_neox,
            float(eps), gemma)
    caches = (key_cache, value_cache, slot_mapping)
    scales = [(s, 1.0) if isinstance(s, Tensor) else (None, float(s)) for s in (k_scale, v_scale)]
    if any(c is not None for c in caches):
        if any(c is None for c in caches):
            given = ", ".join(n for n, c in zip(("key_cache", "value_cache", "slot_mapping"), caches) if c is not None)
            raise ValueError(f"key_cache, value_cache and slot_mapping go together; got only {given}")
        args += (*caches, kv_cache_dtype, scales[0][0], scales[1][0], scales[0][1], scales[1][1])
        op = _QK_NORM_ROPE_KV_CACHE
    else:
        _unused_kv(kv_cache_dtype, k_scale, v_scale, None, None, None)  # the raw op's refusal, by name
        op = _QK_NORM_ROPE
    if torch.compiler.is_compiling() or _dispatch_modes():
        op(*args)
        return
    if _records(qkv, q_weight, k_weight):
        raise RuntimeError("qk_norm_rope works in place and has no backward; call it under torch.no_grad() or "
                           "torch.inference_mode()")
    launch(*args)
    for written in (qkv, key_cache, value_cache):  # written through raw pointers: tell autograd, as in-place ops do
        if written is not None:
            _increment_version(written)

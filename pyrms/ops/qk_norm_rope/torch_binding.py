"""qk_norm_rope for PyTorch: the custom op ``torch.ops.pyrms.qk_norm_rope`` (in place on qkv; its fake checks
dtypes and shapes only), its eager launch on torch tensors, and the user function ``pyrms.torch.qk_norm_rope``.

Imports torch: only pyrms.torch imports this module (the registry names it, ``OpSpec.torch``).

    torch.ops.pyrms.qk_norm_rope(qkv!, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads,
                                 head_dim, rotary_dim, is_neox, eps, gemma) -> ()

No autograd (vLLM's op has none either): an inference op. No ``from __future__ import annotations`` here: torch
infers the op's schema from the annotations as objects.
"""
import torch
from torch import Tensor

from ...torch._layout import check_device, current_stream
from ...torch._routing import dispatch_modes as _dispatch_modes
from ...torch._routing import increment_version as _increment_version
from ...torch._routing import records as _records
from .op import qk_norm_rope as _qk_norm_rope

__all__ = ["qk_norm_rope"]

_FLOAT = (torch.bfloat16, torch.float16, torch.float32)


def launch(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor,
           num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int, is_neox: bool, eps: float,
           gemma: bool) -> None:
    """In place on qkv's q and k heads (see pyrms.torch.qk_norm_rope), on torch's current stream: pyrms's array
    path reads the tensors (and names a bad one)."""
    device = check_device({"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight, "cos_sin_cache": cos_sin_cache,
                           "positions": positions})
    _qk_norm_rope(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads=num_q_heads,
                  num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rotary_dim, is_neox=is_neox,
                  epsilon=float(eps), gemma=gemma, stream=current_stream(device))


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


_QK_NORM_ROPE = torch.ops.pyrms.qk_norm_rope.default


def qk_norm_rope(qkv: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor, *,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int | None = None,
                 is_neox: bool = True, eps: float = 1e-6, gemma: bool = False) -> None:
    """vLLM's ``fused_qk_norm_rope`` on torch tensors, in place on qkv's q and k heads: ``pyrms.qk_norm_rope``
    (its docstring says the arithmetic and the rounding), on torch's current stream. Returns None.

    ``qkv``: a CUDA [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] or [tokens, heads, head_dim] tensor,
    contiguous inside each token (a row slice of a wider buffer works in place); ``q_weight``, ``k_weight``:
    [head_dim] of its dtype; ``cos_sin_cache``: float32 [max_position, rotary_dim] (``rotary_dim`` defaults to its
    second dimension); ``positions``: int64 [tokens]. No autograd: call it under ``torch.no_grad()`` or
    ``torch.inference_mode()`` (RuntimeError when autograd would have to record it). Under torch.compile it is
    the custom op ``torch.ops.pyrms.qk_norm_rope``.
    """
    rot = cos_sin_cache.shape[-1] if rotary_dim is None else rotary_dim
    if torch.compiler.is_compiling() or _dispatch_modes():
        _QK_NORM_ROPE(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rot,
                      is_neox, float(eps), gemma)
        return
    if _records(qkv, q_weight, k_weight):
        raise RuntimeError("qk_norm_rope works in place and has no backward; call it under torch.no_grad() or "
                           "torch.inference_mode()")
    launch(qkv, q_weight, k_weight, cos_sin_cache, positions, num_q_heads, num_kv_heads, head_dim, rot, is_neox, eps,
           gemma)
    _increment_version(qkv)  # written through a raw pointer: tell autograd it changed, as torch's in-place ops do

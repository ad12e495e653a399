"""PyTorch's eager RMSNorm, its residual add and the unfused QK-norm and rotary embedding, spelled once: the
baseline every benchmark sets pyrms's ops against (``python -m pyrms.bench``'s torch and torch.compile
implementations, the lab benches under ``tools/``). Pure: takes the ``torch`` module it is given (pyrms.bench
imports no PyTorch of its own)."""
from __future__ import annotations

from typing import Callable


def norm(torch, eps: float) -> Callable:
    """``norm(x, w)``: ``torch.nn.functional.rms_norm`` over the last dimension of ``x`` (``w`` may be None)."""
    functional = torch.nn.functional

    def rms(x, w):
        return functional.rms_norm(x, x.shape[-1:], w, eps)

    return rms


def add_norm(torch, eps: float) -> Callable:
    """``add_norm(x, r, w)`` -> ``(norm(x + r, w), x + r)``: vLLM's fused residual add written in PyTorch, out of
    place (the sum rounded to the rows' dtype, then normalized)."""
    rms = norm(torch, eps)

    def fused(x, r, w):
        s = x + r
        return rms(s, w), s

    return fused


def qk_norm_rope(torch, eps: float, num_q_heads: int, num_kv_heads: int, head_dim: int) -> Callable:
    """``qk_norm_rope(qkv, q_weight, k_weight, cos_sin_cache, positions)`` -> qkv: the sequence vLLM runs where it
    does not fuse it, in place on qkv's q and k heads (as the fused op): each head's RMSNorm (``norm``), then
    ``RotaryEmbedding.forward_native``'s NeoX rotation over the whole head (its cos and sin, gathered by position,
    cast to the rows' dtype: ``o1 = x1 * cos - x2 * sin``, ``o2 = x2 * cos + x1 * sin``), copied back."""
    rms = norm(torch, eps)
    q_size, kv_size = num_q_heads * head_dim, num_kv_heads * head_dim

    def rotate(x, cos, sin):
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def unfused(qkv, q_weight, k_weight, cos_sin_cache, positions):
        tokens = qkv.shape[0]
        q = rms(qkv[:, :q_size].view(tokens, num_q_heads, head_dim), q_weight)
        k = rms(qkv[:, q_size:q_size + kv_size].view(tokens, num_kv_heads, head_dim), k_weight)
        cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(-2).to(qkv.dtype), sin.unsqueeze(-2).to(qkv.dtype)
        qkv[:, :q_size].copy_(rotate(q, cos, sin).view(tokens, q_size))
        qkv[:, q_size:q_size + kv_size].copy_(rotate(k, cos, sin).view(tokens, kv_size))
        return qkv

    return unfused

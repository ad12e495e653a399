"""PyTorch's eager RMSNorm and its residual add, spelled once: the baseline every benchmark sets pyrms's ops
against (``python -m pyrms.bench``'s torch and torch.compile implementations, the lab benches under ``tools/``).
Pure: takes the ``torch`` module it is given (pyrms.bench imports no PyTorch of its own)."""
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

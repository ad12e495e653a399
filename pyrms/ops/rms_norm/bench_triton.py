"""A straightforward Triton RMSNorm forward, the benchmark's Triton point of comparison.

One program per row, the whole row in registers (BLOCK = next power of two >= hidden), the sum of
squares in fp32, ``y = x * rsqrt(mean(x^2) + eps) * w`` rounded once to the storage dtype. Launch
settings follow the common heuristic (Liger-Kernel's ``calculate_settings``): more warps for wider rows.
Imported only where Triton is importable; it needs PyTorch tensors (Triton reads their pointers).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit row offsets: tensors may exceed 2^31 elements
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * inv * w
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


def launch_settings(hidden: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for a row of ``hidden`` elements."""
    block = triton.next_power_of_2(hidden)
    if block > 65536:
        raise ValueError(f"the Triton kernel keeps a row in registers: hidden {hidden} > 65536 is not supported")
    warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return block, warps


def rms_norm(x, w, y, eps: float) -> None:
    """y[r] = rms_norm(x[r]) * w for the rows of 2-D tensors x and y (last dimension contiguous),
    queued on PyTorch's current stream."""
    tokens, hidden = x.shape
    block, warps = launch_settings(hidden)
    _rms_norm_fwd[(tokens,)](x, w, y, x.stride(0), y.stride(0), hidden, eps, BLOCK=block, num_warps=warps)

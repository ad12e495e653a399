"""The seed kernel (cuda_src/seed_rms_norm.cu) launched as the seed's C++ ``rms_norm`` does.

Kept for the demo and the benchmarks as the point of comparison; it inherits the seed's limits,
which are checked here so that they fail as errors instead of faults: 16-byte aligned pointers,
contiguous rows, and hidden_size / VEC_SIZE <= 1024 threads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import driver, dtypes, kernels
from . import _operands as check
from .._types import DTypeLike, Operand, StreamLike

_SIGNATURE = ("ptr", "ptr", "ptr", "f32")


@dataclass(frozen=True)
class SeedPlan:
    dtype: dtypes.DType
    hidden: int
    vec_size: int  # std::gcd(16 / sizeof(T), HIDDEN_SIZE), as the seed computes it
    block: int  # HIDDEN_SIZE / VEC_SIZE

    source = "seed_rms_norm.cu"

    @property
    def expression(self) -> str:
        return (f"transformer::rms_norm_kernel<{self.dtype.ctype}, {self.vec_size}, {self.hidden}, 2, "
                f"{self.block}>")


def plan_seed(dtype, hidden: int) -> SeedPlan:
    """The seed's launch shape; ValueError where the seed kernel cannot launch."""
    dt = dtypes.get(dtype)
    vec = math.gcd(dt.vec_elems, hidden)
    block = hidden // vec
    if block > 1024:
        raise ValueError(f"the seed kernel launches hidden_size / VEC_SIZE = {hidden} / {vec} = {block} threads, "
                         f"more than the 1024 a block allows (a seed defect); pyrms.rms_norm has no such limit")
    return SeedPlan(dt, hidden, vec, block)


def seed_rms_norm(out: Operand, input: Operand, weight: Operand, epsilon: float, num_tokens: int, hidden_size: int, *,
                  dtype: DTypeLike | None = None, stream: StreamLike = None) -> None:
    """The seed kernel on contiguous [num_tokens, hidden_size] rows; same arguments as pyrms.rms_norm."""
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    hint = None if dtype is None else dtypes.get(dtype)
    ops = [check.operand(n, v, hint) for n, v in (("out", out), ("input", input), ("weight", weight))]
    dt = check.resolve_dtype(dtype, ops)
    for op in ops[:2]:
        if check.row_stride(op, None, "stride", num_tokens, hidden) != hidden:
            raise ValueError(f"the seed kernel needs contiguous rows; {op.name} is strided")
    check.vector(ops[2], hidden)
    for op in ops:
        if op.ptr % 16:
            raise ValueError(f"the seed kernel needs 16-byte aligned pointers (a seed defect); "
                             f"{op.name} is {op.ptr:#x}")
    p = plan_seed(dt, hidden)
    handle = driver.stream_handle(stream)
    device = driver.current_device()
    check.same_device(ops, device.ordinal)
    kernel = kernels.get(p.source, p.expression, (p.expression,), _SIGNATURE, device)
    kernel.launch(num_tokens, p.block, (ops[0].ptr, ops[1].ptr, ops[2].ptr, eps), handle)

"""The seed kernel (cuda_src/seed_rms_norm.cu) launched as the seed's C++ program does.

Kept for the demo and the benchmarks as the point of comparison; it inherits the seed's limits,
which are checked here so that they fail as errors instead of faults: 16-byte aligned pointers,
contiguous rows, and hidden_size / VEC_SIZE <= 1024 threads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ... import driver, dtypes, launch
from ...contract import KernelPlan
from .. import _operands as check
from .. import _placement
from .._prepared import PreparedCache, scalars_ok
from ..._types import DTypeLike, Operand, StreamLike



@dataclass(frozen=True)
class SeedPlan(KernelPlan):
    dtype: dtypes.DType
    hidden: int
    vec_size: int  # std::gcd(16 / sizeof(T), HIDDEN_SIZE), as the seed computes it
    block: int  # HIDDEN_SIZE / VEC_SIZE

    source = "seed_rms_norm.cu"
    kernel = "rms_norm_kernel"

    @property
    def expression(self) -> str:
        # NUM_DIMS 2: the seed's contiguous [rows, hidden] layout (its 3- and 4-D branches are empty)
        return self.contract.expression(DATA_TYPE=self.dtype.ctype, VEC_SIZE=self.vec_size, HIDDEN_SIZE=self.hidden,
                                        NUM_DIMS=2, BLOCK_SIZE=self.block)


def plan_seed(dtype, hidden: int) -> SeedPlan:
    """The seed's launch shape; ValueError where the seed kernel cannot launch."""
    dt = dtypes.get(dtype)
    vec = math.gcd(dt.vec_elems, hidden)
    block = hidden // vec
    if block > 1024:
        raise ValueError(f"the seed kernel launches hidden_size / VEC_SIZE = {hidden} / {vec} = {block} threads, "
                         f"more than the 1024 a block allows (a seed defect); pyrms's own kernel has no such limit")
    return SeedPlan(dt, hidden, vec, block)


class Prepared:
    """One (device, dtype, hidden) of the seed kernel, resolved once: plan, kernel, row limit."""

    __slots__ = ("kernel", "launch", "row_bytes", "max_rows", "placed")

    def __init__(self, device, dtype, hidden):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        p = plan_seed(dt, hidden)
        self.kernel = launch.get_kernel(p.source, p.expression, (p.expression,), p.signature, device)
        self.launch = launch.RowLaunch(p.signature, p.block, (), device)
        self.row_bytes, self.max_rows = hidden * dt.itemsize, check.max_rows(hidden, hidden)
        self.placed = _placement.for_device(device)

    def __call__(self, out, input, weight, epsilon, num_tokens, stream) -> bool:
        if not scalars_ok(epsilon, num_tokens, self.max_rows) or not (out and input and weight) or (
                out | input | weight) & 15:  # the seed's 16-byte vectors: aligned pointers only
            return False
        o_end, x_end = out + num_tokens * self.row_bytes, input + num_tokens * self.row_bytes
        if (out < x_end and input < o_end and out != input) or (out < weight + self.row_bytes and weight < o_end):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok((out, input, weight), handle):
            return False
        self.launch(self.kernel, num_tokens, handle, out, input, weight, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def seed_rms_norm(out: Operand, input: Operand, weight: Operand, epsilon: float, num_tokens: int, hidden_size: int, *,
                  dtype: DTypeLike | None = None, stream: StreamLike = None) -> None:
    """The seed kernel on contiguous [num_tokens, hidden_size] rows; the arguments of pyrms's plain RMSNorm forward."""
    if type(out) is int and type(input) is int and type(weight) is int:
        prepared = _prepared.get(dtype, hidden_size)
        if prepared is not None and prepared(out, input, weight, epsilon, num_tokens, stream):
            return
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
    plan_seed(dt, hidden)  # its limit, before any driver call
    o_span = check.span(ops[0].ptr, num_tokens, hidden, hidden, dt.itemsize)
    check.no_partial_overlap(ops[0], o_span, ops[1], check.span(ops[1].ptr, num_tokens, hidden, hidden, dt.itemsize),
                             may_alias=True)
    check.no_partial_overlap(ops[0], o_span, ops[2], check.span(ops[2].ptr, 1, hidden, hidden, dt.itemsize),
                             may_alias=False)
    check.stream(stream)
    device = driver.selected_device()
    check.same_device(ops, device.ordinal)
    _placement.check(device, {op.name: op.ptr for op in ops}, stream)
    launched = _prepared.require(dt, hidden)(ops[0].ptr, ops[1].ptr, ops[2].ptr, eps, num_tokens, stream)
    assert launched, "the checks above accept what the prepared launch declines"

"""``pyrms.gated_rms_norm``: the RMSNorm of x gated by silu(z), per group of columns (kernel:
cuda_src/gated_rms_norm.cu; the twin: pyrms.ops.gated_rms_norm.twin.gated_rms_norm_twin)."""
from __future__ import annotations

from typing import Any

from ... import dtypes
from .. import _explain
from .. import _operands as check
from .. import _placement
from .. import _row_plan as planner
from ..._types import DTypeLike, Operand, StreamLike
from .._prepared import Pointers, PreparedCache, RowLaunches, use_pdl
from .plan import group_size_arg, plan_gated_rms_norm

_DEFAULT_DTYPE = dtypes.BFLOAT16
# Up to this many (row, group) blocks the latency kernel launches (plan.FEW_ROWS); read at every call, so that
# tests.support.testing.forced_row_variant can force either kernel.
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, group_size, strides, options, pdl) of gated_rms_norm, resolved once. A call
    checks the pointers, epsilon and the row count; False launches nothing and the general path names what is
    wrong."""

    __slots__ = ("launches", "groups", "max_rows", "pointers", "weightless", "placed")

    def __init__(self, device, dtype, hidden, group_size, x_stride, z_stride, out_stride, norm_before_gate,
                 weight_dtype, pdl):
        hidden = check.size("hidden_size", hidden)
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        gs = group_size_arg(group_size, hidden)
        strides = tuple(check.stride_arg(name, value, hidden) for name, value in
                        (("x_stride", x_stride), ("z_stride", z_stride), ("out_stride", out_stride)))
        p = plan_gated_rms_norm(dt, gs, norm_before_gate=check.flag("norm_before_gate", norm_before_gate),
                                weight_dtype=weight_dtype)
        self.groups = hidden // gs
        self.launches = RowLaunches(p, (gs, self.groups, *strides), device, use_pdl(device, pdl), strides)
        self.max_rows = min(check.max_rows(hidden, *strides), check.INT32_MAX // self.groups)
        self.weightless = p.weight == "none"
        x_s, z_s, o_s = strides
        operands = [(dt.itemsize, o_s), (dt.itemsize, x_s), (dt.itemsize, z_s)]
        weight_dtype = p.weight_dtype
        if weight_dtype is not None:
            operands.append((weight_dtype.itemsize, 0))
        # out (written) disjoint from x, z and the weight
        self.pointers = Pointers(hidden, operands, [(0, j, False) for j in range(1, len(operands))])
        self.placed = _placement.for_device(device)

    def __call__(self, out, x, z, weight, epsilon, num_tokens, stream) -> bool:
        """Launch, or return False having launched nothing; weight 0 without a weight."""
        pointers = (out, x, z) if self.weightless else (out, x, z, weight)
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_rows and type(epsilon) is float
                and 0.0 <= epsilon <= check.FLOAT32_MAX and type(weight) is int
                and (weight == 0 or not self.weightless) and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        self.launches(_FEW_ROWS, num_tokens * self.groups, handle, out | x | z | weight, out, x, z, weight, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def gated_rms_norm(x: Operand, z: Operand, weight: Operand | None = None, eps: float = 1e-6, *,
                   out: Operand | None = None, group_size: int | None = None, norm_before_gate: bool = True,
                   num_tokens: int | None = None, hidden_size: int | None = None, dtype: DTypeLike | None = None,
                   x_stride: int | None = None, z_stride: int | None = None, out_stride: int | None = None,
                   weight_dtype: DTypeLike | None = None, stream: StreamLike = None, pdl: bool = True) -> Any:
    """Gated RMSNorm (Mamba2's and gated DeltaNet's output norm): mamba_ssm's ``rmsnorm_fn(x, weight, None, z=z,
    eps=eps, group_size=group_size, norm_before_gate=norm_before_gate)`` (vLLM's ``RMSNormGated``), bit for bit
    ``pyrms.ops.gated_rms_norm.twin.gated_rms_norm_twin``; returns ``out`` (a new pyrms.Tensor when None).

    - ``norm_before_gate=True``: ``out = rmsnorm(x) * w * silu(z)``;
    - ``norm_before_gate=False`` (Mamba2's order): ``out = rmsnorm(x * silu(z)) * w``;

    ``rmsnorm(v) = v / sqrt(mean(v^2) + eps)`` with the mean over each group of ``group_size`` consecutive columns
    (default: the whole row; hidden_size must be a multiple of it), ``silu(z) = z * sigmoid(z)``. Rounding, as the
    peer's Triton kernel: fp32 from the loads to the store (x * silu(z) is never rounded to the storage dtype),
    one rounding at the store; each operation one correctly rounded fp32 operation (fused multiply-adds only inside
    the sigmoid's exp), the products in the peer's order (((x * inv) * w) * silu(z), or (gx * inv) * w); the sum of
    squares in the RMSNorm row's reduction tree for (dtype, group_size, the group's alignment), whatever the batch.
    Where it differs from the peer: the sigmoid's exp is pyrms's own, a polynomial in operations that round once
    each (the peer's uses the hardware's approximate exp2; silu is within 3 fp32 ulps of float64's), so results may
    differ in the last bits; no bias (the peer's RMSNormGated has none either).

    ``x``, ``z``, ``out``: [num_tokens, hidden_size] of one dtype (bfloat16, float16 or float32), contiguous along
    the hidden dimension, each with its own row stride; arrays (pyrms Tensors, torch tensors, objects with
    ``__cuda_array_interface__`` or ``__dlpack__``) or raw device pointers (int; then ``out``, ``num_tokens`` and
    ``hidden_size`` are required, ``x_stride``/``z_stride``/``out_stride`` default to hidden_size and ``dtype`` to
    bfloat16). ``weight``: [hidden_size] of x's dtype or float32 (beside bf16/fp16 rows; ``weight_dtype='float32'``
    for a raw pointer), or None (no weight: w = 1). Any element alignment of any pointer; ``out`` must not overlap
    x, z or the weight. ``stream``, ``pdl``: as every pyrms op takes them. The launch is asynchronous on ``stream``.
    """
    if type(x) is int and type(z) is int:
        if weight is None:
            weight, weight_dtype = 0, check.no_weight(weight_dtype)
        static = (dtype, hidden_size, group_size, x_stride, z_stride, out_stride, norm_before_gate, weight_dtype, pdl)
        prepared = _prepared.get(*static)
        if prepared is not None and type(out) is int and prepared(out, x, z, weight, eps, num_tokens, stream):
            return out
        _explain.explain(_DECLARATION, dict(out=out, x=x, z=z, weight=weight, epsilon=eps, num_tokens=num_tokens,
                                            hidden_size=hidden_size, dtype=dtype, x_stride=x_stride,
                                            z_stride=z_stride, out_stride=out_stride, stream=stream, pdl=pdl,
                                            norm_before_gate=norm_before_gate, group_size=group_size,
                                            weight_dtype=weight_dtype))
        launched = _prepared.require(*static)(out, x, z, weight, float(eps), num_tokens, stream)
        assert launched, "the checks above accept what the prepared launch declines"
        return out
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("x", x, x_stride, "x_stride", False),
                                                 ("z", z, z_stride, "z_stride", False),
                                                 ("out", out, out_stride, "out_stride", True)],
                                           vectors=[] if weight is None else [("weight", weight)], mixed=("weight",))
    if out is None:
        out = check.allocate_like(x, dt, max(rows, 1), hidden)
        found["out"] = (out.ptr, hidden)
    if rows == 0:  # an empty batch of arrays: nothing to do
        return out
    w, weight_dtype = check.weight_operand(found.get("weight"), weight_dtype)
    gated_rms_norm(found["x"][0], found["z"][0], w, eps, out=found["out"][0], group_size=group_size,
                   norm_before_gate=norm_before_gate, num_tokens=rows, hidden_size=hidden, dtype=dt,
                   x_stride=found["x"][1], z_stride=found["z"][1], out_stride=found["out"][1],
                   weight_dtype=weight_dtype, stream=stream, pdl=pdl)
    return out


def _facts(call: dict, num_tokens: int, hidden: int):
    """gated_rms_norm's own checks for the shared explain path: group_size, the plan's options (the weight's kind),
    a weightless call's pointer, and the (row, group) blocks' count; the plan gives the operands' dtypes."""
    dt = _DEFAULT_DTYPE if call["dtype"] is None else dtypes.get(call["dtype"])
    gs = group_size_arg(call["group_size"], hidden)
    p = plan_gated_rms_norm(dt, gs, norm_before_gate=call["norm_before_gate"], weight_dtype=call["weight_dtype"])
    if p.weight == "none":
        check.weightless_pointer(call["weight"])
    if num_tokens * (hidden // gs) > check.INT32_MAX:
        raise ValueError(f"num_tokens * (hidden_size / group_size) must be at most {check.INT32_MAX}, got "
                         f"{num_tokens} * {hidden // gs}")
    return p


# out (written) first, so that overlaps read "out and ..."; x, z and the weight (none for weight_dtype='none').
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", stride="out_stride", written=True),
              _explain.Memory("x", stride="x_stride"), _explain.Memory("z", stride="z_stride"),
              _explain.Memory("weight", _explain.Fact("weight_dtype"))),
    facts=_facts, flags=("pdl", "norm_before_gate"), strides=("x_stride", "z_stride", "out_stride"))

"""``pyrms.gated_rms_norm_backward``: dx, dz and dweight of the gated RMSNorm (kernels:
cuda_src/gated_rms_norm_backward.cu, and norm_backward.cuh's sums over rows; the twin:
pyrms.ops.gated_rms_norm.twin.gated_rms_norm_backward_twin)."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from ... import driver, dtypes, launch
from .. import _explain
from .. import _operands as check
from .. import _placement, _workspace
from .._norm_backward.plan import SHARED_SUMS_LIMIT
from .._norm_backward.prepared import parameter_gradients
from .._prepared import Pointers, PreparedCache, scalars_ok, use_pdl
from ..._types import DTypeLike, Operand, StreamLike, Workspace
from ...tensor import Tensor
from .plan import group_size_arg, plan_gated_rms_norm_backward

_ROW_STRIDES = ("grad_x_stride", "grad_z_stride", "grad_output_stride", "x_stride", "z_stride")


class Prepared:
    """One (device, dtype, hidden, group_size, strides, options, pdl) of the gated backward, resolved once: the plan,
    kernel 1 and (with a weight) the sums over rows, the shared-memory opt-in and the pointer checks. A call returns
    False having launched nothing where its pointers or scalars are not right; the general path names what."""

    __slots__ = ("device", "plan", "kernel", "sum_kernel", "shared", "strides", "max_rows", "pointers", "weight_item",
                 "pdl", "placed")

    def __init__(self, device, dtype, hidden, group_size, grad_x_stride, grad_z_stride, grad_output_stride, x_stride,
                 z_stride, norm_before_gate, weight_dtype, pdl):
        self.device, self.pdl = device, use_pdl(device, pdl)
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        gs = group_size_arg(group_size, hidden)
        self.strides = tuple(check.stride_arg(name, value, hidden) for name, value in zip(
            _ROW_STRIDES, (grad_x_stride, grad_z_stride, grad_output_stride, x_stride, z_stride)))
        p = self.plan = plan_gated_rms_norm_backward(dt, hidden, gs,
                                                     norm_before_gate=check.flag("norm_before_gate", norm_before_gate),
                                                     weight_dtype=weight_dtype)
        self.kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        self.sum_kernel = None if p.weightless else launch.get_kernel(p.source, p.sum_expression, p.group,
                                                                      p.sum_contract.signature, device)
        # The block's column sums in shared memory where they fit what this GPU lets a block opt into (less 1 KiB
        # for the kernel's static shared memory), else in the workspace: the same order.
        limit = device.max_shared_memory_per_block_optin - 1024
        self.shared = p.shared_bytes if p.shared_bytes <= limit else 0
        if self.shared:
            self.kernel.set_max_dynamic_shared(min(SHARED_SUMS_LIMIT, limit))
        self.max_rows = check.max_rows(hidden, *self.strides)
        self.weight_item = 0 if p.weightless else p.grad_dtype.itemsize
        # grad_x, grad_z, grad_output, x, z, then the weight and grad_weight: what is written (grad_x, grad_z,
        # grad_weight) disjoint from everything else.
        operands = [(dt.itemsize, s) for s in self.strides] + [(self.weight_item, 0)] * (2 * (not p.weightless))
        written = (0, 1) if p.weightless else (0, 1, 6)
        self.pointers = Pointers(hidden, operands, [(i, j, False) for i in written for j in range(len(operands))
                                                    if j != i and not (j in written and j < i)])
        self.placed = _placement.for_device(device)

    def __call__(self, grad_x, grad_z, grad_weight, grad_output, x, z, weight, epsilon, num_tokens, stream,
                 workspace) -> bool:
        """Launch, or return False having launched nothing; weight and grad_weight 0 without a weight."""
        p = self.plan
        pointers = (grad_x, grad_z, grad_output, x, z) + (() if p.weightless else (weight, grad_weight))
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and self.pointers.ok(pointers, num_tokens)
                and (not p.weightless or weight == grad_weight == 0)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        rows_per_block, chunk = p.rows_per_block(num_tokens), p.chunk_for(num_tokens)
        # One row per block: kernel 1 writes each row's terms, and the sums make the chunks of them.
        ws_chunk, group = (1, chunk) if rows_per_block == 1 else (chunk, 1)
        needed = p.workspace_bytes(num_tokens)
        borrowed = contextlib.nullcontext(workspace or 0) if workspace or not needed else _workspace.borrowed(
            self.device, handle, needed)
        gx_s, gz_s, go_s, x_s, z_s = self.strides
        with borrowed as ws:
            self.kernel.launch((-(-num_tokens // rows_per_block), p.groups), p.block,
                               (grad_x, grad_z, ws, grad_output, x, z, weight, epsilon, num_tokens, p.group_size, gx_s,
                                gz_s, go_s, x_s, z_s, ws_chunk, rows_per_block, p.ws_stride, 1 if self.shared else 0,
                                p.fold), handle, self.shared, pdl=self.pdl)
            if self.sum_kernel is not None:
                # column 0 of a workspace row sits at the weight's phase in the column split
                phase = weight // self.weight_item % p.dtype.vec_elems
                self.sum_kernel.launch(-(-p.hidden // 32), (32, 32),
                                       (grad_weight, ws, p.hidden, -(-num_tokens // chunk), p.ws_stride, phase, group,
                                        p.workspace_rows(num_tokens)), handle, pdl=self.pdl)
        return True


_prepared = PreparedCache(Prepared)


def gated_rms_norm_backward(grad_x: Operand | None, grad_z: Operand | None, grad_weight: Operand | None,
                            grad_output: Operand, x: Operand, z: Operand, weight: Operand | None = None,
                            eps: float = 1e-6, *, group_size: int | None = None, norm_before_gate: bool = True,
                            num_tokens: int | None = None, hidden_size: int | None = None,
                            dtype: DTypeLike | None = None, grad_x_stride: int | None = None,
                            grad_z_stride: int | None = None, grad_output_stride: int | None = None,
                            x_stride: int | None = None, z_stride: int | None = None,
                            weight_dtype: DTypeLike | None = None, workspace: Workspace | None = None,
                            stream: StreamLike = None, pdl: bool = True) -> Any:
    """The gradients of ``pyrms.gated_rms_norm(x, z, weight, eps, group_size=..., norm_before_gate=...)`` for the
    upstream gradient ``grad_output``, bit for bit ``pyrms.ops.gated_rms_norm.twin.gated_rms_norm_backward_twin``;
    returns ``(grad_x, grad_z, grad_weight)`` (grad_weight None without a weight).

    Per group of ``group_size`` columns, with s = silu(z), s' = silu'(z), inv the forward's 1 / rms (recomputed, the
    same bits):

    - ``norm_before_gate=True``: x_hat = x * inv, g = w * (dy * s), dx = inv * (g - x_hat * mean(x_hat * g)),
      dz = (dy * (x_hat * w)) * s', dweight = sum over rows of (dy * s) * x_hat;
    - ``norm_before_gate=False``: v = x * s, v_hat = v * inv, g = w * dy, dv = inv * (g - v_hat * mean(v_hat * g)),
      dx = dv * s, dz = (dv * x) * s', dweight = sum over rows of dy * v_hat.

    fp32 from the loads to the stores, each operation rounded once; dx and dz rounded once to the rows' dtype;
    dweight summed in fp32 per column over chunks of rows, then over chunks, in an order fixed by the row indices
    (the norm backward's), so every gradient is the same bits whatever the batch's split or the GPU, then written in
    the weight's dtype. This is the gradient of the exact function (mamba_ssm's ``rmsnorm_fn`` backward computes the
    same formula; its rounding differs in the last bits).

    ``grad_output``, ``x``, ``z``, ``grad_x``, ``grad_z``: [num_tokens, hidden_size] of one dtype (bfloat16,
    float16 or float32), contiguous along the hidden dimension, each with its own row stride; ``weight`` and
    ``grad_weight``: [hidden_size] of x's dtype or float32 beside bf16/fp16 rows (``weight_dtype='float32'`` for a
    raw pointer), or None (no weight, and no grad_weight). Arrays (sizes then inferred; grad_x, grad_z and
    grad_weight None: allocated) or raw device pointers (int: every operand given, num_tokens and hidden_size
    required, the strides default to hidden_size and dtype to bfloat16). Any element alignment; what is written is
    disjoint from everything else. ``workspace``: fp32 scratch for the sums over rows (none without a weight), by
    default borrowed per call from pyrms's stream-ordered pool, as the norm backward's. ``stream``, ``pdl``: as every
    pyrms op takes them; two launches (one without a weight) are queued on ``stream``, asynchronously.
    """
    # Raw pointers (a workspace of them too, trusted to hold the plan's bytes): the prepared launch, which declines
    # what it cannot take; the checks below then name it.
    rows_raw = all(type(v) is int for v in (grad_x, grad_z, grad_output, x, z))
    if rows_raw and (workspace is None or type(workspace) is int):
        weightless = weight is None and grad_weight is None
        static = (dtype, hidden_size, group_size, grad_x_stride, grad_z_stride, grad_output_stride, x_stride, z_stride,
                  norm_before_gate, "none" if weightless and weight_dtype in (None, "none") else weight_dtype, pdl)
        prepared = _prepared.get(*static)
        if (prepared is not None and (weightless or type(weight) is int and type(grad_weight) is int)
                and prepared(grad_x, grad_z, grad_weight or 0, grad_output, x, z, weight or 0, eps, num_tokens, stream,
                             workspace)):
            return grad_x, grad_z, grad_weight
    if any(v is not None and type(v) is not int for v in (grad_x, grad_z, grad_output, x, z, weight, grad_weight)):
        return _arrays(grad_x, grad_z, grad_weight, grad_output, x, z, weight, eps, group_size, norm_before_gate,
                       num_tokens, hidden_size, dtype, grad_x_stride, grad_z_stride, grad_output_stride, x_stride,
                       z_stride, weight_dtype, workspace, stream, pdl)
    call = dict(grad_x=grad_x, grad_z=grad_z, grad_weight=grad_weight, grad_output=grad_output, x=x, z=z,
                weight=weight, epsilon=eps, group_size=group_size, norm_before_gate=norm_before_gate,
                num_tokens=num_tokens, hidden_size=hidden_size, dtype=dtype, grad_x_stride=grad_x_stride,
                grad_z_stride=grad_z_stride, grad_output_stride=grad_output_stride, x_stride=x_stride,
                z_stride=z_stride, weight_dtype=weight_dtype, workspace=workspace, stream=stream, pdl=pdl)
    facts = _explain.explain(_DECLARATION, call)
    p = facts.plan
    prepared = _prepared.require(p.dtype, p.hidden, p.group_size, grad_x_stride, grad_z_stride, grad_output_stride,
                                 x_stride, z_stride, norm_before_gate, facts.weight_kind, pdl)
    launched = prepared(grad_x, grad_z, grad_weight or 0, grad_output, x, z, weight or 0, float(eps), num_tokens,
                        stream, facts.workspace)
    assert launched, "the checks above accept what the prepared launch declines"
    return grad_x, grad_z, grad_weight


def _arrays(grad_x, grad_z, grad_weight, grad_output, x, z, weight, eps, group_size, norm_before_gate, num_tokens,
            hidden_size, dtype, grad_x_stride, grad_z_stride, grad_output_stride, x_stride, z_stride, weight_dtype,
            workspace, stream, pdl):
    """The call on arrays: read them (allocating grad_x, grad_z and grad_weight where None), then the raw-pointer
    call on their pointers. An empty batch launches nothing (an allocated grad_weight is zeros)."""
    parameter_gradients(weight, grad_weight, None, None)  # no grad_weight without a weight
    given = {"grad_x": (grad_x, grad_x_stride), "grad_z": (grad_z, grad_z_stride)}
    dt, rows, hidden, found = check.arrays(
        dtype, num_tokens, hidden_size,
        rows=[("grad_output", grad_output, grad_output_stride, "grad_output_stride", False),
              ("x", x, x_stride, "x_stride", False), ("z", z, z_stride, "z_stride", False),
              *((name, value, stride, f"{name}_stride", True) for name, (value, stride) in given.items()
                if value is not None)],
        vectors=[] if weight is None else [("weight", weight)], mixed=("weight",))
    w, weight_dtype = check.weight_operand(found.get("weight"), weight_dtype)
    out = {}
    for name, (value, _) in given.items():
        out[name] = value
        if value is None:
            out[name] = check.allocate_like(x, dt, max(rows, 1), hidden)
            found[name] = (out[name].ptr, hidden)
    gw = None
    if w is not None:
        if grad_weight is None:
            grad_weight = Tensor.empty((hidden,), dt if weight_dtype is None else weight_dtype, driver.selected_device())
            if rows == 0:
                grad_weight.fill_bytes(0)
        _, ops = check.parameter_vectors(hidden, dt, {"grad_weight": grad_weight},
                                         dt if weight_dtype is None else weight_dtype)
        gw = ops["grad_weight"].ptr
    if rows:
        gated_rms_norm_backward(found["grad_x"][0], found["grad_z"][0], gw, found["grad_output"][0], found["x"][0],
                                found["z"][0], w, eps, group_size=group_size, norm_before_gate=norm_before_gate,
                                num_tokens=rows, hidden_size=hidden, dtype=dt, grad_x_stride=found["grad_x"][1],
                                grad_z_stride=found["grad_z"][1], grad_output_stride=found["grad_output"][1],
                                x_stride=found["x"][1], z_stride=found["z"][1], weight_dtype=weight_dtype,
                                workspace=workspace, stream=stream, pdl=pdl)
    return out["grad_x"], out["grad_z"], grad_weight


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """The gated backward's own checks for the shared explain path: group_size and the plan's options (the
    weight's kind), a weightless call's pointers, a caller's workspace; returns the plan and the operands'
    dtypes."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    gs = group_size_arg(call["group_size"], hidden)
    weightless = call["weight"] is None
    parameter_gradients(call["weight"], call["grad_weight"], None, None)  # no grad_weight without a weight
    if weightless:
        check.no_weight(call["weight_dtype"])
    elif call["grad_weight"] is None:
        raise ValueError("grad_weight is required with a weight (its gradient is written there)")
    p = plan_gated_rms_norm_backward(dt, hidden, gs, norm_before_gate=call["norm_before_gate"],
                                     weight_dtype="none" if weightless else call["weight_dtype"])
    own = None if call["workspace"] is None else check.workspace(call["workspace"], p.workspace_bytes(num_tokens))
    return SimpleNamespace(plan=p, dtype=dt, weight_dtype=p.grad_dtype, weight_kind=None if p.weight == "same" else p.weight,
                           workspace=own and own.ptr, workspace_span=own and (0, own.span[1] - own.span[0]))


# What is written (grad_x, grad_z, grad_weight) first, so that overlaps read "grad_x and ..."; nothing in place.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("grad_x", stride="grad_x_stride", written=True),
              _explain.Memory("grad_z", stride="grad_z_stride", written=True),
              _explain.Memory("grad_weight", _explain.Fact("weight_dtype"), written=True, optional=True),
              _explain.Memory("grad_output", stride="grad_output_stride"),
              _explain.Memory("x", stride="x_stride"), _explain.Memory("z", stride="z_stride"),
              _explain.Memory("weight", _explain.Fact("weight_dtype"), optional=True),
              _explain.Memory("workspace", dtypes.INT8, span=_explain.Fact("workspace_span"), optional=True,
                              key=_explain.Fact("workspace"))),
    facts=_facts, flags=("pdl", "norm_before_gate"), strides=_ROW_STRIDES)

"""The launch shared by ``pyrms.rms_norm_backward`` and ``pyrms.layer_norm_backward``
(kernels: cuda_src/norm_backward.cuh, instantiated in rms_norm_backward.cu and layer_norm.cu)."""
from __future__ import annotations

import contextlib

from .. import driver, kernels
from .. import plan as planner
from . import _operands as check
from . import _workspace

_ROWS_SIGNATURE = ("ptr", "ptr", "ptr", "ptr", "ptr", "f32", "i32", "i32", "i64", "i64", "i64", "i32", "i32", "i64", "i32")
_SUM_SIGNATURE = ("ptr", "ptr", "i32", "i32", "i64", "i32")
_opted_in: set[tuple[int, str, str]] = set()


def backward_workspace_bytes(num_tokens: int, hidden_size: int, *, layer_norm: bool = False) -> int:
    """Bytes of ``workspace=`` that one backward launch of this shape needs (any dtype)."""
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    return planner.plan_norm_backward("float32", hidden, layer_norm=layer_norm).workspace_bytes(num_tokens)


def norm_backward(*, layer_norm, grad_input, grad_weight, grad_bias, grad_output, input, weight, epsilon,
                  num_tokens, hidden_size, dtype, grad_output_stride, input_stride, grad_input_stride, gemma,
                  grad_weight_dtype, workspace, rows_per_block, stream):
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    # grad_bias None (a LayerNorm without bias): its plane of the workspace is filled but not summed.
    params = {"grad_weight": grad_weight, **({"grad_bias": grad_bias} if layer_norm and grad_bias is not None else {})}
    dt, pdt, r = check.layout(num_tokens, hidden, dtype,
                              rows={"grad_input": (grad_input, grad_input_stride, "grad_input_stride"),
                                    "grad_output": (grad_output, grad_output_stride, "grad_output_stride"),
                                    "input": (input, input_stride, "input_stride")},
                              vectors={"weight": weight}, params=params, params_dtype=grad_weight_dtype)
    p = planner.plan_norm_backward(dt, hidden, layer_norm=layer_norm, gemma=gemma, grad_dtype=pdt)
    rows_per_block = check.multiple("rows_per_block", rows_per_block, p.chunk_rows, p.chunk_rows)
    needed = p.workspace_bytes(num_tokens)
    own = None if workspace is None else check.workspace(workspace, needed)
    check.disjoint([r["grad_input"], *(r[name] for name in params)],
                   [r["grad_output"], r["input"], r["weight"], *([own] if own else [])],
                   in_place={("grad_input", "grad_output"), ("grad_input", "input")})
    handle = driver.stream_handle(stream)
    device = driver.selected_device()
    check.same_device([region.op for region in r.values()], device.ordinal)

    rows_kernel = kernels.get(p.source, p.expression, p.group, _ROWS_SIGNATURE, device)
    sum_kernel = kernels.get(p.source, p.sum_expression, p.group, _SUM_SIGNATURE, device)
    if p.shared_bytes > 48 * 1024 and (device.ordinal, p.source, p.expression) not in _opted_in:
        rows_kernel.set_max_dynamic_shared(planner.SHARED_SUMS_LIMIT)
        _opted_in.add((device.ordinal, p.source, p.expression))
    chunks = p.chunks(num_tokens)
    weight_phase = r["weight"].ptr // dt.itemsize % dt.vec_elems  # where column 0 sits in a workspace row
    with contextlib.nullcontext(own.ptr) if own else _workspace.borrowed(device, handle, needed) as ws:
        rows_kernel.launch(-(-num_tokens // rows_per_block), p.block,
                           (r["grad_input"].ptr, ws, r["grad_output"].ptr, r["input"].ptr, r["weight"].ptr, eps,
                            num_tokens, hidden, r["grad_input"].stride, r["grad_output"].stride, r["input"].stride,
                            p.chunk_rows, rows_per_block, p.ws_stride, 1 if p.shared_bytes else 0),
                           handle, p.shared_bytes)
        for k, name in enumerate(params):  # dweight, then dbias from the next plane
            plane = ws + k * chunks * p.ws_stride * 4
            sum_kernel.launch(-(-hidden // 32), (32, 32), (r[name].ptr, plane, hidden, chunks, p.ws_stride, weight_phase),
                              handle)

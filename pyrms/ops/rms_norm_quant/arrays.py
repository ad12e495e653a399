"""The quantizing ops' array operands (rms_norm_quant, fused_add_rms_norm_quant; the standalone quantizers' input
and out too): ``out`` as 8-bit rows, the
static scale or scale_ub as a one-element float32 array, the per-token and per-group scales as float32 arrays,
each read (_adapter) and checked against the sizes, then handed on as the pointer (and strides) of the raw-pointer
path. Errors name the operand, what it is and what is allowed; the device is checked last, so that a missing
driver is reported after bad arguments (as _operands.arrays does)."""
from __future__ import annotations

import math

from ... import dtypes
from .. import _adapter, _operands as check


def quantized_out(value, stride, out_dtype, num_tokens, hidden_size) -> tuple[int, int, dtypes.QuantDType, int, int]:
    """(pointer, row stride, dtype, num_tokens, hidden_size) of a quantizing op's ``out`` array: [..., hidden]
    rows of float8_e4m3fn, float8_e5m2 or int8 (_adapter.read's quantized; 1-byte storage holds what out_dtype
    names), checked as check.arrays() checks its rows (check.row_array). The dtype returned is the array's,
    which must agree with an out_dtype given (None: the array's own sets it)."""
    hint = None if out_dtype is None else dtypes.quantized(out_dtype)
    view = _adapter.read("out", value, hint, written=True, quantized=True)
    num_tokens, hidden_size, ptr, stride = check.row_array("out", view, stride, "out_stride", num_tokens, hidden_size)
    dt = check.out_dtype_operand(view.dtype, out_dtype, dtypes.quantized)
    check.arrays_on_device({"out": view})
    return ptr, stride, dt, num_tokens, hidden_size


def standalone_rows(input, out, dtype, num_tokens, hidden_size, input_stride, out_stride, out_dtype) -> tuple | None:
    """The standalone quantizers' (static_quant's, dynamic_quant's) ``input`` rows and ``out`` as given (raw
    pointers stay as they are) or read from arrays: (input, input_stride, out, out_stride, out_dtype, dtype,
    num_tokens, hidden_size), or None for an array of no rows (nothing to launch)."""
    if type(input) is not int:
        dtype, num_tokens, hidden_size, found = check.arrays(
            dtype, num_tokens, hidden_size, rows=[("input", input, input_stride, "input_stride", False)], vectors=[])
        if num_tokens == 0:
            return None
        input, input_stride = found["input"]
    if type(out) is not int:
        out, out_stride, out_dtype, num_tokens, hidden_size = quantized_out(out, out_stride, out_dtype, num_tokens,
                                                                            hidden_size)
        if num_tokens == 0:
            return None
    return input, input_stride, out, out_stride, out_dtype, dtype, num_tokens, hidden_size


def scalar_array(name: str, value, written: bool = False) -> int:
    """The pointer of a float32 array of one element (shape (), (1,), or any of size 1): a static scale or
    scale_ub that the kernel reads, or (written) a per-tensor scale that it writes."""
    view = _float32(name, value, written=written)
    if math.prod(view.shape) != 1:
        raise ValueError(f"{name} has shape {view.shape}; expected one float32 element (shape () or (1,))")
    check.arrays_on_device({name: view})
    return view.ptr


def token_scales(value, num_tokens: int) -> int:
    """The pointer of per-token scales: num_tokens contiguous float32, shape (num_tokens,) or (num_tokens, 1)."""
    return check.float32_per_row("scale", value, num_tokens, "per-token scales", written=True)


def group_scale_array(value, num_tokens: int, groups: int, column_major: bool, scale_stride) -> tuple[int, object]:
    """(pointer, scale_stride) of per-group scales: a float32 (num_tokens, groups) array, row-major (strides
    (S, 1), S >= groups) or, with column_major, transposed (strides (1, S), S >= num_tokens: the (groups, S)
    buffer DeepGEMM reads, seen through .t(), as vLLM allocates it). S is the scale_stride, which must agree
    with one given; a dimension of one entry has no stride to say, so then scale_stride stays as given."""
    view = _float32("scale", value, written=True)
    layout = (f"strides (1, S) with S >= {num_tokens}: a ({groups}, S) row-major buffer seen through .t()"
              if column_major else f"strides (S, 1) with S >= {groups}")
    if view.shape != (num_tokens, groups):
        transposed = " (pass its .t())" if column_major and view.shape == (groups, num_tokens) else ""
        raise ValueError(f"scale has shape {view.shape}; per-group scales are ({num_tokens}, {groups}) float32 "
                         f"(num_tokens, groups) with {layout}{transposed}")
    # inner: the step between neighbours (a row's groups, or a group's tokens), 1; outer: S, between those runs
    token_step, group_step = view.strides
    inner, inner_n, outer, outer_n = ((token_step, num_tokens, group_step, groups) if column_major
                                      else (group_step, groups, token_step, num_tokens))
    if (inner_n > 1 and inner != 1) or (outer_n > 1 and outer < inner_n):
        swapped = inner_n > 1 and outer_n > 1 and outer == 1  # the other layout's strides
        other = ("; row-major scales need column_major_scales=False" if column_major
                 else "; column-major scales (strides (1, S)) need column_major_scales=True")
        raise ValueError(f"scale has strides {view.strides} (elements); expected {layout}{other if swapped else ''}")
    if outer_n > 1:  # else there is no S to read: scale_stride stays as given
        if scale_stride is not None and scale_stride != outer:
            raise ValueError(f"scale_stride={scale_stride} disagrees with scale's "
                             f"{'group' if column_major else 'row'} stride {outer}")
        scale_stride = outer
    check.arrays_on_device({"scale": view})
    return view.ptr, scale_stride


def _float32(name: str, value, written: bool) -> _adapter.View:
    """A non-null float32 array operand of a quantizing op (its scales); its device is checked by the caller,
    last, so that a missing driver is reported after bad arguments."""
    return check.float32_array(name, value, "scales", written=written)

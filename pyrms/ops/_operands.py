"""Argument checking shared by every op: everything is validated before any launch.

Memory arguments are raw device pointers (int), pyrms Tensors, or any object exposing
``__cuda_array_interface__`` (PyTorch, CuPy, Numba). Arrays carry their own shape, strides,
dtype and device, which are checked against the scalar arguments; raw pointers are trusted
for everything but null-ness and element alignment. Errors name the argument, the value and
what is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import dtypes
from ..tensor import Tensor

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Operand:
    name: str
    ptr: int
    array: Tensor | None = None  # None for a raw pointer


def operand(name: str, value, dtype_hint: dtypes.DType | None = None) -> Operand:
    """Wrap a pointer-or-array argument; TypeError for anything else, ValueError for null."""
    if type(value) is int:
        if value <= 0:
            raise ValueError(f"{name} must be a non-null device pointer, got {value}")
        return Operand(name, value)
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{name} must be a device pointer (int), a pyrms.Tensor or an object with "
                        f"__cuda_array_interface__, got {value!r}")
    if isinstance(value, Tensor):
        array = value
    elif hasattr(value, "__cuda_array_interface__"):
        array = Tensor.from_cuda_array(value, dtype=dtype_hint)
    elif isinstance(value, int):  # int subclasses (numpy ints are not int, but IntEnum etc. are)
        return operand(name, int(value), dtype_hint)
    else:
        raise TypeError(f"{name} must be a device pointer (int), a pyrms.Tensor or an object with "
                        f"__cuda_array_interface__, got {type(value).__name__}")
    if array.ptr == 0:
        raise ValueError(f"{name} has a null data pointer")
    return Operand(name, array.ptr, array)


def raw_pointers(names, pointers, dt: dtypes.DType) -> None:
    """The checks raw int pointers get: non-null and aligned to one element."""
    for name, ptr in zip(names, pointers):
        if ptr <= 0 or ptr % dt.itemsize:
            if ptr <= 0:
                raise ValueError(f"{name} must be a non-null device pointer, got {ptr}")
            raise ValueError(f"{name} pointer {ptr:#x} is not aligned to {dt.itemsize} bytes, "
                             f"as {dt.name} elements must be")


def stride_arg(name: str, value, hidden: int) -> int:
    """A row stride argument: hidden when None, else an int >= hidden."""
    if value is None:
        return hidden
    value = size(name, value, INT64_MAX)
    if value < hidden:
        raise ValueError(f"{name} must be >= hidden_size ({hidden}) so rows do not overlap, got {value}")
    return value


def size(name: str, value, limit: int = INT32_MAX) -> int:
    """A positive integer size no larger than `limit`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0 or value > limit:
        raise ValueError(f"{name} must be between 1 and {limit}, got {value}")
    return value


def epsilon(value) -> float:
    """A finite, non-negative epsilon (fp32 accumulation makes tiny values safe in fp16/bf16)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"epsilon must be a float, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"epsilon must be finite and >= 0, got {value}")
    return value


def resolve_dtype(explicit, operands: list[Operand]) -> dtypes.DType:
    """The explicit dtype, else the arrays' dtype, else bfloat16; all arrays must agree with it."""
    dt = dtypes.get(explicit) if explicit is not None else None
    for op in operands:
        if op.array is None:
            continue
        if dt is None:
            dt = op.array.dtype
        elif op.array.dtype != dt:
            raise ValueError(f"{op.name} has dtype {op.array.dtype.name}, but the dtype is {dt.name}")
    return dt if dt is not None else dtypes.BFLOAT16


def row_stride(op: Operand, given, stride_name: str, num_tokens: int, hidden: int) -> int:
    """The row stride (elements) of a [num_tokens, hidden] operand, checked against its array if any."""
    stride = None if given is None else stride_arg(stride_name, given, hidden)
    if op.array is not None:
        shape, strides = op.array.shape, op.array.strides
        if len(shape) == 1 and num_tokens == 1:
            shape, strides = (1, shape[0]), (shape[0], strides[0])
        if len(shape) != 2 or shape != (num_tokens, hidden):
            raise ValueError(f"{op.name} has shape {op.array.shape}, expected ({num_tokens}, {hidden})")
        if hidden > 1 and strides[1] != 1:
            raise ValueError(f"{op.name} must be contiguous along the hidden dimension (stride 1), "
                             f"got strides {op.array.strides}")
        array_stride = strides[0] if num_tokens > 1 else (stride or max(strides[0], hidden))
        if stride is not None and array_stride != stride:
            raise ValueError(f"{stride_name}={stride} disagrees with {op.name}'s row stride {array_stride}")
        if array_stride < hidden:
            raise ValueError(f"{op.name} has row stride {array_stride} < hidden_size {hidden}: rows overlap")
        stride = array_stride
    if stride is None:
        stride = hidden
    extent(op.name, num_tokens, stride, hidden)
    return stride


def extent(name: str, num_tokens: int, stride: int, hidden: int) -> None:
    """Rows must span fewer than 2^59 elements, so byte offsets fit in 64 bits for every dtype."""
    if (num_tokens - 1) * stride + hidden > INT64_MAX // 16:
        raise ValueError(f"{name} spans {num_tokens} rows of stride {stride}: more than 2^59 elements")


def vector(op: Operand, length: int) -> None:
    """A contiguous 1-D operand of `length` elements (the weight, the bias)."""
    if op.array is None:
        return
    shape, strides = op.array.shape, op.array.strides
    if shape != (length,):
        raise ValueError(f"{op.name} has shape {shape}, expected ({length},)")
    if length > 1 and strides[0] != 1:
        raise ValueError(f"{op.name} must be contiguous, got strides {strides}")


def aligned(ops: list[Operand], dt: dtypes.DType) -> None:
    """Every pointer must be aligned to one element (any further misalignment is handled by the kernels)."""
    for op in ops:
        if op.ptr % dt.itemsize:
            raise ValueError(f"{op.name} pointer {op.ptr:#x} is not aligned to {dt.itemsize} bytes, "
                             f"as {dt.name} elements must be")


def span(ptr: int, rows: int, stride: int, hidden: int, itemsize: int) -> tuple[int, int]:
    return ptr, ptr + ((rows - 1) * stride + hidden) * itemsize


def no_partial_overlap(a: Operand, a_span, b: Operand, b_span, *, may_alias: bool) -> None:
    """Two operands must be disjoint, or (where the op allows it) exactly the same memory."""
    if a_span[0] >= b_span[1] or b_span[0] >= a_span[1]:
        return
    if may_alias and a_span == b_span:
        return
    allowed = " or exactly the same memory (in place)" if may_alias else ""
    raise ValueError(f"{a.name} and {b.name} overlap; they must be disjoint{allowed}")


def same_device(ops: list[Operand], device_ordinal: int) -> None:
    """Arrays must live on the device the launch runs on."""
    for op in ops:
        if op.array is not None and op.array.device is not None and op.array.device != device_ordinal:
            raise ValueError(f"{op.name} is on device {op.array.device}, but the launch runs on device {device_ordinal}")

"""Argument checking shared by every op: everything is validated before any launch.

Memory arguments are raw device pointers (int), pyrms Tensors, or any object exposing
``__cuda_array_interface__`` (PyTorch, CuPy, Numba). Arrays carry their own shape, strides,
dtype and device, which are checked against the scalar arguments; raw pointers are trusted
for everything but null-ness and element alignment. Errors name the argument, the value and
what is allowed.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass
from typing import Any

from .. import driver, dtypes
from ..tensor import Tensor, contiguous_strides
from . import _adapter, _views

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38
# The smallest positive float32 (2^-149): a smaller scale would be 0 in a kernel's fp32.
FLOAT32_TINY = 1.401298464324817e-45


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
        raise _adapter.bad_kind(name, value)
    if isinstance(value, int):  # int subclasses (numpy ints are not int, but IntEnum etc. are)
        return operand(name, int(value), dtype_hint)
    view = _adapter.read(name, value, dtype_hint)
    if view.dtype is None:
        raise ValueError(f"{name}: its dtype is unknown; pass dtype=")
    array = value if isinstance(value, Tensor) else Tensor(view.ptr, view.shape, view.dtype, view.strides, view.device,
                                                           owner=value)
    if array.ptr == 0:
        raise ValueError(f"{name} has a null data pointer")
    return Operand(name, array.ptr, array)


def stride_arg(name: str, value, hidden: int) -> int:
    """A row stride argument: hidden when None, else an int >= hidden."""
    if value is None:
        return hidden
    value = size(name, value, INT64_MAX)
    if value < hidden:
        raise ValueError(f"{name} must be >= hidden_size ({hidden}) so rows do not overlap, got {value}")
    return value


def sizes(num_tokens, hidden_size, rows=None) -> tuple[int, int]:
    """num_tokens and hidden_size of a call on raw pointers, where both are required; ``rows(num_tokens)``
    reads the rows where num_tokens is not one size (the N-D form's leading sizes)."""
    if num_tokens is None or hidden_size is None:
        raise TypeError("num_tokens and hidden_size are required when every operand is a raw pointer")
    return size("num_tokens", num_tokens) if rows is None else rows(num_tokens), size("hidden_size", hidden_size)


def size(name: str, value, limit: int = INT32_MAX) -> int:
    """A positive integer size no larger than `limit` (Python or numpy integers, not bools)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = operator.index(value)
    if value <= 0 or value > limit:
        raise ValueError(f"{name} must be between 1 and {limit}, got {value}")
    return value


def epsilon(value) -> float:
    """A finite, non-negative epsilon that float32 (the kernels' type) holds; fp32 accumulation makes
    tiny values safe in fp16/bf16."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"epsilon must be a float, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"epsilon must be finite and >= 0, got {value}")
    if value > FLOAT32_MAX:
        raise ValueError(f"epsilon must fit in float32 (at most {FLOAT32_MAX:.7g}), got {value}")
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


def max_rows(hidden: int, *strides: int) -> int:
    """The most rows a launch takes: byte offsets must fit in 64 bits (extent) and rows in an int32."""
    return min((INT64_MAX // 16 - hidden) // max(strides) + 1, INT32_MAX)


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


# --- Arrays: read once, turned into the pointers and strides of the raw-pointer path --------------


def stream(value) -> int:
    """A stream argument as a raw handle: the common kinds inline, the rest through the driver layer."""
    if value is None:
        return 0
    if type(value) is int and 0 <= value < 2**64:
        return value
    return driver.stream_handle(value)


def collapse(name: str, view: _adapter.View) -> tuple[int, int, int]:
    """(rows, hidden, row stride) of a [..., hidden] array whose leading dimensions collapse to one
    row stride (dimensions of size 1 are ignored); the hidden dimension must be contiguous."""
    shape, strides = view.shape, view.strides
    if not shape:
        raise ValueError(f"{name} is 0-dimensional; expected [..., hidden_size]")
    hidden = shape[-1]
    if hidden > 1 and strides[-1] != 1:
        raise ValueError(f"{name} must be contiguous along the hidden dimension (stride 1), got shape {shape} "
                         f"and strides {strides} (elements)")
    if 0 in shape[:-1]:  # an empty batch: no row to address, whatever the strides say
        return 0, hidden, hidden
    if len(shape) == 2:  # [rows, hidden], the common case, without the loop: _lead_stride's answer
        return shape[0], hidden, strides[0] if shape[0] != 1 else hidden
    stride = _lead_stride(shape, strides)
    if stride is None:
        raise ValueError(f"{name} has shape {shape} and strides {strides} (elements): its leading dimensions "
                         f"do not collapse to one row stride; pass {name}.contiguous() or one row at a time")
    return math.prod(shape[:-1]), hidden, stride


def _lead_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The one row stride a [..., hidden] layout's leading dimensions collapse to (dimensions of size 1
    ignored; shape[-1] where no dimension is longer than 1), or None where they do not collapse."""
    rows, stride = 1, shape[-1]
    for size_, step in zip(reversed(shape[:-1]), reversed(strides[:-1])):
        if size_ == 1:
            continue
        if rows == 1:
            stride = step
        elif step != stride * rows:
            return None
        rows *= size_
    return stride


def _needs_nd(rows: list, views: dict, weight_name: str | None) -> bool:
    """Whether arrays() takes the N-D form: some row operand is an array, and a row array's leading dimensions
    do not collapse to one row stride (collapse's test; one or two dimensions always do) or the weight is a
    [rows' first dimension, hidden] array. One loop, no generators: every array call of an N-D op asks."""
    weight = views.get(weight_name) if weight_name else None
    per_row_weight = weight is not None and len(weight.shape) == 2
    for name, *_ in rows:
        view = views.get(name)
        if view is not None and (per_row_weight or len(view.shape) > 2
                                 and _lead_stride(view.shape, view.strides) is None):
            return True
    return False


def _nd_arrays(dt, num_tokens, hidden_size, rows: list, views: dict, raw: dict, weight_name: str | None,
               mixed_out: str | None = None):
    """The N-D form of arrays(): the row operands' leading dimensions (one shape for all) collapsed
    jointly (_views.joint_lead) to at most three, each operand with its own strides; a weight of shape
    [shape[0], hidden] is one per outer row (weight_stride). Raw row pointers take stride tuples along
    the arrays' leading dimensions (default: contiguous)."""
    first = next(name for name, *_ in rows if name in views)
    shape = views[first].shape
    if len(shape) < 1:
        raise ValueError(f"{first} is 0-dimensional; expected [..., hidden_size]")
    lead, hidden = shape[:-1], shape[-1]
    if hidden_size is not None and hidden_size != hidden:
        raise ValueError(f"{first} has shape {shape}, whose last dimension is not hidden_size={hidden_size}")
    strides = {}
    for name, value, stride, stride_name, _ in rows:
        view = views.get(name)
        if view is None:
            if name not in raw:
                continue
            given = stride if stride is not None else _views.contiguous(lead, hidden)
            if not isinstance(given, tuple) or len(given) != len(lead):
                raise ValueError(f"{stride_name} must be a tuple of {len(lead)} strides (elements) along "
                                 f"{first}'s leading dimensions {lead}, got {stride!r}")
            strides[name] = given
            continue
        if view.shape != shape:
            raise ValueError(f"{name} has shape {view.shape}, but {first} has {shape}")
        if hidden > 1 and view.strides[-1] != 1:
            raise ValueError(f"{name} must be contiguous along the hidden dimension (stride 1), got shape "
                             f"{view.shape} and strides {view.strides} (elements)")
        if stride is not None:
            raise ValueError(f"{stride_name} was given for the array {name}, whose strides are its own")
        strides[name] = tuple(view.strides[:-1])
    found = {}
    w_view = views.get(weight_name) if weight_name else None
    per_row = w_view is not None and len(w_view.shape) == 2
    if per_row:
        if w_view.shape != (lead[0] if lead else 1, hidden):
            raise ValueError(f"{weight_name} has shape {w_view.shape}, expected ({hidden},), or "
                             f"[{lead[0] if lead else 1}, {hidden}] for a weight per outer row ({first}'s first "
                             f"and last dimensions)")
        if hidden > 1 and w_view.strides[1] != 1:
            raise ValueError(f"{weight_name} must be contiguous along the hidden dimension, got strides {w_view.strides}")
    if 0 in lead:
        return None
    sizes, steps = _views.joint_lead(lead, strides, per_row and lead[0] > 1, hidden)
    if num_tokens is not None and num_tokens not in (sizes, lead, _views.rows(sizes)):
        raise ValueError(f"num_tokens={num_tokens!r} disagrees with {first}'s leading dimensions {lead}")
    for name in strides:
        ptr = views[name].ptr if name in views else raw[name]
        if ptr == 0:
            raise ValueError(f"{name} has a null data pointer")
        found[name] = (ptr, steps[name], *_out_dtype_entry(name, mixed_out, views))
    if w_view is not None:
        if w_view.ptr == 0:
            raise ValueError(f"{weight_name} has a null data pointer")
        w_stride = w_view.strides[0] if per_row and lead[0] > 1 else 0
        found[weight_name] = (w_view.ptr, hidden, w_view.dtype, w_stride)
    return sizes, hidden, found


def _out_dtype_entry(name: str, mixed_out: str | None, views: dict, mixed: tuple[str, ...] = ()) -> tuple:
    """The dtype a `mixed_out` (or `mixed`: an fp32 residual) row operand's entry carries (None for a raw
    pointer); nothing for the others."""
    if name != mixed_out and name not in mixed:
        return ()
    return (views[name].dtype if name in views else None,)


def arrays(dtype, num_tokens, hidden_size, rows: list, vectors: list,
           mixed: tuple[str, ...] = (), nd: bool = False,
           mixed_out: str | None = None) -> tuple[dtypes.DType, Any, int, dict]:
    """The array (or raw pointer) operands of one call, read and checked against each other.

    rows: (name, value, stride argument, its name, written) for [..., hidden] operands; vectors:
    (name, value) for [hidden] ones. num_tokens and hidden_size are taken from the arrays when None,
    checked against them otherwise. Returns (dtype, rows, hidden, name -> (pointer, row stride)) for
    the raw-pointer path, which checks the rest (alignment, extents, overlaps) with its own messages.
    `mixed`: vectors that may be float32 beside rows of another dtype (an fp32 weight), the first being
    the weight; their entries are (pointer, hidden, dtype), the dtype None for a raw pointer. Row operands
    may be mixed too (an fp32 residual): their entries are then (pointer, row stride, dtype).
    `mixed_out`: the row operand (the output) that may be float32 beside rows of another dtype; its entry is
    (pointer, row stride, dtype), the dtype None for a raw pointer (out_dtype_operand reads it).
    `nd`: the op takes N-D layouts (OpSpec entries with an ``_nd`` entry point): where a row array's leading dimensions do not collapse to
    one stride, or the first `mixed` vector is a [rows' first dimension, hidden] weight per outer row,
    rows is a tuple of leading sizes, each row operand's stride a tuple (_nd_arrays), and the weight's
    entry (pointer, hidden, dtype, weight_stride); rows is 0 for an empty batch (Any: an int without `nd`).
    """
    hint = None if dtype is None else dtypes.get(dtype)
    views, raw = {}, {}
    for name, value, *rest in (*rows, *((n, v, None, None, False) for n, v in vectors)):
        if value is None and name == "out":
            continue  # the allocating form
        if isinstance(value, bool) or value is None:
            raise _adapter.bad_kind(name, value)
        if isinstance(value, int):  # int subclasses too
            raw[name] = int(value)
        else:
            views[name] = _adapter.read(name, value, hint, written=rest[2])
    dt = hint
    for name, view in views.items():
        if name in mixed or name == mixed_out:
            continue
        if dt is None:
            dt = view.dtype
        elif view.dtype is not dt:
            raise ValueError(f"{name} has dtype {view.dtype.name}, but the dtype is {dt.name}"
                             + ("" if hint is not None else f" (that of {next(iter(views))})"))
    if dt is None and mixed_out in views:  # no other array says the rows' dtype: the output's does, as before
        dt = views[mixed_out].dtype
    dt = dt or dtypes.BFLOAT16
    for name in (mixed_out, *mixed):
        view = views.get(name)
        if view is None or view.dtype is dt:
            continue
        if dt is dtypes.FLOAT32:  # fp32 rows: fp32 all through
            raise ValueError(f"{name} has dtype {view.dtype.name}, but the dtype is {dt.name}"
                             + ("" if hint is not None else f" (that of {next(iter(views))})"))
        if view.dtype is not dtypes.FLOAT32:
            raise ValueError(f"{name} has dtype {view.dtype.name}; it must be {dt.name} (the input's) or float32")
    weight_name = mixed[0] if mixed else None
    if nd and views and _needs_nd(rows, views, weight_name):
        made = _nd_arrays(dt, num_tokens, hidden_size, rows, views, raw, weight_name, mixed_out)
        if made is None:  # an empty batch
            return dt, 0, views[next(name for name, *_ in rows if name in views)].shape[-1], {}
        arrays_on_device(views)
        return (dt, *made)
    found = {}
    for name, value, stride, stride_name, _ in rows:
        view = views.get(name)
        if view is None:
            if name in raw:
                found[name] = (raw[name], stride, *_out_dtype_entry(name, mixed_out, views, mixed))
            continue
        num_tokens, hidden_size, ptr, array_stride = row_array(name, view, stride, stride_name, num_tokens,
                                                               hidden_size)
        found[name] = (ptr, array_stride, *_out_dtype_entry(name, mixed_out, views, mixed))
    if hidden_size is None or num_tokens is None:
        raise TypeError("num_tokens and hidden_size are required when every operand is a raw pointer")
    for name, value in vectors:
        view = views.get(name)
        if view is None:
            found[name] = (raw[name], hidden_size, None) if name in mixed else (raw[name], hidden_size)
            continue
        if view.shape != (hidden_size,):
            raise ValueError(f"{name} has shape {view.shape}, expected ({hidden_size},)")
        if hidden_size > 1 and view.strides[0] != 1:
            raise ValueError(f"{name} must be contiguous, got strides {view.strides} (elements)")
        if view.ptr == 0:
            raise ValueError(f"{name} has a null data pointer")
        found[name] = (view.ptr, hidden_size, view.dtype) if name in mixed else (view.ptr, hidden_size)
    arrays_on_device(views)
    return dt, num_tokens, hidden_size, found


def row_array(name: str, view: _adapter.View, stride, stride_name: str, num_tokens,
              hidden_size) -> tuple[int, int, int, int]:
    """(num_tokens, hidden_size, pointer, row stride) of a [..., hidden] row array (collapse): num_tokens and
    hidden_size are taken from it where None and checked against it otherwise, and a stride argument given
    against its row stride (which one row does not have: then the argument's, or at least hidden)."""
    n, h, array_stride = collapse(name, view)
    if hidden_size is None:
        hidden_size = h
    if num_tokens is None:
        num_tokens = n
    if (n, h) != (num_tokens, hidden_size):
        raise ValueError(f"{name} has shape {view.shape}, expected ({num_tokens}, {hidden_size}), or "
                         f"[..., {hidden_size}] with {num_tokens} rows in all (num_tokens, hidden_size)")
    if n == 1:
        array_stride = stride if stride is not None else max(array_stride, h)
    elif stride is not None and stride != array_stride:
        raise ValueError(f"{stride_name}={stride} disagrees with {name}'s row stride {array_stride}")
    elif array_stride < h:
        raise ValueError(f"{name} has row stride {array_stride} < hidden_size {h}: its rows overlap")
    if view.ptr == 0 and n:
        raise ValueError(f"{name} has a null data pointer")
    return num_tokens, hidden_size, view.ptr, array_stride


def arrays_on_device(views: dict) -> None:
    """Arrays must be on the calling thread's device; checked last: a missing driver after bad arguments."""
    if any(view.device is not None for view in views.values()):
        ordinal = driver.selected_device().ordinal
        for name, view in views.items():
            if view.device is not None and view.device != ordinal:
                raise ValueError(f"{name} is on device {view.device}, but the launch runs on device {ordinal} "
                                 f"(pyrms.driver.set_device selects the calling thread's device)")


def allocate_like(shape_of, dt: dtypes.DType, rows: int, hidden: int) -> Tensor:
    """A new contiguous output for the allocating form (``out=None``): the input's shape if it is an
    array, else [rows, hidden]; the caller owns it (close() frees it)."""
    shape = None
    if type(shape_of) is not int:
        shape = tuple(getattr(shape_of, "shape", ())) or None
    return Tensor.empty(shape if shape and shape[-1] == hidden else (rows, hidden), dt, driver.selected_device())


# --- Launch layouts: what the family's ops share beyond their declarations (pyrms/ops/_explain.py) --------


@dataclass(frozen=True)
class Region:
    """A validated memory argument: its operand, row stride (elements) and byte span [start, end)."""

    op: Operand
    stride: int
    span: tuple[int, int]

    @property
    def ptr(self) -> int:
        return self.op.ptr


def _param_hint(value, explicit: dtypes.DType | None, storage: dtypes.DType | None) -> dtypes.DType | None:
    """How to read a parameter-gradient array: as `explicit`, else by its own typestr, except raw 2-byte
    storage (PyTorch's bfloat16 exported as int16), which only the storage dtype can name."""
    if explicit is not None or type(value) is int:
        return explicit
    typestr = getattr(value, "__cuda_array_interface__", {}).get("typestr", "") if not isinstance(value, Tensor) else ""
    return storage if typestr[1:] in ("i2", "u2", "V2") else None


def parameter_vectors(hidden: int, dt: dtypes.DType, params: dict, params_dtype=None,
                      given: dtypes.DType | None = None) -> tuple[dtypes.DType | None, dict[str, Operand]]:
    """Validate [hidden] vectors of their own dtype (parameter gradients, name -> pointer or array) beside rows of
    ``dt``: in ``params_dtype`` (default: their arrays' dtype, else ``dt``), which must be ``dt`` or float32, each
    non-null and aligned to it; ``given``: the dtype the call named (None: none), the only one that names raw
    2-byte storage. Returns (their dtype, None where there are none; their operands by name)."""
    if not params:
        return None, {}
    explicit = None if params_dtype is None else dtypes.get(params_dtype)
    param_ops = [operand(name, value, _param_hint(value, explicit, given)) for name, value in params.items()]
    pdt = resolve_dtype(explicit if explicit is not None else _first_dtype(param_ops, dt), param_ops)
    if pdt not in (dt, dtypes.FLOAT32):
        raise ValueError(f"{param_ops[0].name} dtype must be {dt.name} (the dtype) or float32, got {pdt.name}")
    aligned(param_ops, pdt)
    for op in param_ops:
        vector(op, hidden)
    return pdt, {op.name: op for op in param_ops}


def _first_dtype(ops: list[Operand], default: dtypes.DType) -> dtypes.DType:
    return next((op.array.dtype for op in ops if op.array is not None), default)


def workspace(value, nbytes: int) -> Region:
    """A caller's workspace: a device pointer (int, trusted to hold nbytes), a pyrms DeviceBuffer,
    or a contiguous array (``__cuda_array_interface__``); 16-byte aligned, at least nbytes."""
    size_ = None
    if type(value) is int:
        ptr = value
    elif hasattr(value, "__cuda_array_interface__"):
        cai = value.__cuda_array_interface__
        ptr, itemsize = int(cai["data"][0]), int(cai["typestr"][2:])
        shape, strides = tuple(cai["shape"]), cai.get("strides")
        if strides is not None and tuple(strides) != tuple(s * itemsize for s in contiguous_strides(shape)):
            raise ValueError(f"workspace must be contiguous, got strides {strides} for shape {shape}")
        size_ = math.prod(shape) * itemsize
    elif isinstance(getattr(value, "ptr", None), int) and isinstance(getattr(value, "nbytes", None), int):
        ptr, size_ = value.ptr, value.nbytes
    else:
        raise TypeError("workspace must be a device pointer (int), a pyrms.DeviceBuffer or an array with "
                        f"__cuda_array_interface__, got {type(value).__name__}")
    if ptr <= 0 or ptr % 16:
        raise ValueError(f"workspace pointer {ptr:#x} must be non-null and 16-byte aligned")
    if size_ is not None and size_ < nbytes:
        raise ValueError(f"workspace has {size_} bytes; this launch needs {nbytes} "
                         "(pyrms.backward_workspace_bytes)")
    return Region(Operand("workspace", ptr), 0, (ptr, ptr + nbytes))


def float32_array(name: str, value, what: str, *, written: bool) -> _adapter.View:
    """A non-null float32 array operand (scales, a saved rstd): its view; its device is the caller's to check,
    last, so that a missing driver is reported after bad arguments. ``what``: the operand's kind, for the
    dtype's message."""
    view = _adapter.read(name, value, None, written=written)
    if view.dtype is not dtypes.FLOAT32:
        raise ValueError(f"{name} has dtype {view.dtype.name}; {what} are float32")
    if view.ptr == 0:
        raise ValueError(f"{name} has a null data pointer")
    return view


def float32_per_row(name: str, value, num_tokens: int, what: str, *, written: bool) -> int:
    """The pointer of an array of one float32 per row (per-token scales, a saved rstd): num_tokens contiguous
    elements, shape (num_tokens,) or (num_tokens, 1), on pyrms's device. ``what``: their kind, for messages."""
    view = float32_array(name, value, what, written=written)
    if view.shape not in ((num_tokens,), (num_tokens, 1)):
        raise ValueError(f"{name} has shape {view.shape}; {what} are ({num_tokens},) or ({num_tokens}, 1) "
                         f"float32 (num_tokens)")
    if num_tokens > 1 and view.strides[0] != 1:
        raise ValueError(f"{name} has strides {view.strides} (elements); {what} must be contiguous "
                         f"(stride 1 between tokens)")
    arrays_on_device({name: view})
    return view.ptr


def no_weight(weight_dtype) -> str:
    """The weight_dtype of a call with weight=None: "none" (giving a dtype for no weight is an error)."""
    if weight_dtype is not None and weight_dtype != "none":
        raise ValueError(f"weight_dtype={weight_dtype!r} was given for weight=None; leave it out")
    return "none"


def weightless_pointer(weight) -> None:
    """A raw-pointer call without a weight (weight_dtype='none') takes weight None or 0: a pointer there is refused,
    not ignored."""
    if weight not in (None, 0):
        raise ValueError(f"weight_dtype='none' is a call without a weight, but weight={weight!r} was given; "
                         "pass weight=None")


def weight_operand(found, weight_dtype) -> tuple[int | None, dtypes.DTypeLike | None]:
    """(pointer, weight_dtype) of the raw-pointer call from check.arrays' entry for a `mixed` weight
    (None: weight=None). An array's dtype is the weight's, and must agree with a weight_dtype given."""
    if found is None:
        return None, no_weight(weight_dtype)
    ptr, _, array_dtype = found
    return ptr, dtype_operand("weight", array_dtype, weight_dtype)


def out_dtype_operand(array_dtype, out_dtype, resolve=dtypes.get):
    """The out_dtype of the raw-pointer call from a `mixed_out` entry's dtype (None: a raw pointer, whose
    dtype out_dtype gives); an array's dtype must agree with an out_dtype given (read by `resolve`:
    dtypes.quantized for the quantizing ops' out)."""
    return dtype_operand("out", array_dtype, out_dtype, resolve)


def dtype_operand(name: str, array_dtype, given, resolve=dtypes.get):
    """The `<name>_dtype` argument of the raw-pointer call from a `mixed` entry's dtype (None: a raw pointer,
    whose dtype the argument gives); an array's dtype must agree with one given."""
    if array_dtype is None:
        return given
    if given is not None and resolve(given) is not array_dtype:
        raise ValueError(f"{name} has dtype {array_dtype.name}, but {name}_dtype is {resolve(given).name}")
    return array_dtype


def in_place_dtypes(out: int, input: int, out_dtype: dtypes.DType, dtype: dtypes.DType, input_name: str = "input",
                    out_name: str = "out") -> None:
    """In place (out is the input) needs one dtype: an output of another dtype cannot overwrite the rows it reads."""
    if out == input and out_dtype is not dtype:
        raise ValueError(f"{out_name} is {input_name} (in place), but {out_name}'s dtype {out_dtype.name} is not "
                         f"{input_name}'s {dtype.name}: in place needs one dtype; give {out_name} an allocation of "
                         "its own")


def scale_value(what: str, value, *, inf_ok: bool = False) -> None:
    """A quantization scale (or scale bound) given as a value: a float, finite and positive in float32 (``inf_ok``:
    or +inf, an absent bound); TypeError or ValueError naming ``what`` otherwise."""
    if type(value) is not float:
        raise TypeError(f"{what} must be a float, a device pointer (int) or a float32 array of one element, got "
                        f"{type(value).__name__} {value!r}")
    if not (inf_ok and value == math.inf) and not (math.isfinite(value) and FLOAT32_TINY <= value <= FLOAT32_MAX):
        raise ValueError(f"{what} must be finite and > 0 in float32 (between 2^-149 and {FLOAT32_MAX:.7g}), "
                         f"got {value!r}")


def flag(name: str, value) -> bool:
    """An on/off option: True or False (numpy's bool too); anything else is a TypeError naming it."""
    if value is True or value is False or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")

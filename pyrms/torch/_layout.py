"""What pyrms.torch reads from torch tensors: dtypes, devices, streams and row layouts.

Everything here reads torch's own attributes (``dtype``, ``shape``, ``stride()``, ``data_ptr()``,
``get_device()``): building ``__cuda_array_interface__`` dicts costs microseconds on torch's side.
"""
from __future__ import annotations

import torch

from .. import driver

# torch dtype -> pyrms dtype name: the three dtypes pyrms's kernels are compiled for.
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_ALLOWED = "torch.bfloat16, torch.float16 or torch.float32"
# torch dtype -> pyrms's name: the quantized outputs the kernels write.
QUANT_NAMES = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2", torch.int8: "int8"}
QUANT_ALLOWED = "torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8"

try:  # torch's current stream of a device as a raw int handle, what inductor's generated code calls:
    current_stream = torch._C._cuda_getCurrentRawStream  # torch.cuda.current_stream() builds a Stream object
except AttributeError:  # private, so it may move; CPU-only builds lack it (no CUDA tensor reaches a launch there)
    def current_stream(device_index: int) -> int:
        return torch.cuda.current_stream(device_index).cuda_stream


def dtype_name(dtype: torch.dtype, name: str = "x") -> str:
    """pyrms's name for a torch dtype; TypeError naming the dtype and what is allowed otherwise."""
    found = DTYPE_NAMES.get(dtype)
    if found is None:
        raise TypeError(f"{name} has dtype {dtype}; pyrms.torch supports {_ALLOWED}")
    return found


def check_meta(x: torch.Tensor, vectors: dict, rows: dict | None = None, float32_rows: tuple = (),
               mixed_vectors: tuple = (), per_head: tuple = ()) -> str:
    """The checks that need no data and no device, made by the fake (meta) implementations too:
    ``x`` is a tensor of a supported dtype with at least one dimension; each of ``rows`` (name ->
    tensor) has x's shape and dtype (or float32, for those named in ``float32_rows``: an fp32
    residual, the gradient of an fp32 output); each of ``vectors`` (name -> tensor or None) is a
    contiguous [hidden] tensor of x's dtype (of any supported dtype for those named in ``mixed_vectors``:
    fp32 master weights beside bf16 activations); those named in ``per_head`` may also be [x.shape[-2], hidden]
    (a weight per head, x being [..., heads, head_dim]). Returns x's pyrms dtype name."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    name = dtype_name(x.dtype)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalized one), got a 0-d tensor")
    for other, t in (rows or {}).items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{other} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != x.dtype and not (other in float32_rows and t.dtype == torch.float32):
            also = " (or torch.float32)" if other in float32_rows else ""
            raise TypeError(f"{other} has dtype {t.dtype}, but x has {x.dtype}{also}: pyrms computes in one dtype")
        if t.shape != x.shape:
            raise ValueError(f"{other} has shape {tuple(t.shape)}, but x has {tuple(x.shape)}")
    hidden = x.shape[-1]
    for other, t in vectors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{other} must be a torch.Tensor, got {type(t).__name__}")
        if other in mixed_vectors:
            dtype_name(t.dtype, other)
        elif t.dtype != x.dtype:
            raise TypeError(f"{other} has dtype {t.dtype}, but x has {x.dtype}: pyrms computes in one dtype, "
                            f"so convert it ({other}.to({x.dtype}))")
        if t.shape != (hidden,) and not (other in per_head and x.dim() >= 2 and t.shape == x.shape[-2:]):
            also = f" or {tuple(x.shape[-2:])}, one per head" if other in per_head and x.dim() >= 2 else ""
            raise ValueError(f"{other} has shape {tuple(t.shape)}, expected ({hidden},){also}: the size of x's last "
                             "dimension")
        if not t.is_contiguous():
            raise ValueError(f"{other} must be contiguous, got stride {t.stride()} ({other}.contiguous() makes it so)")
    return name


def check_device(tensors: dict) -> int:
    """The CUDA device index that all ``tensors`` (name -> tensor or None) share, which must be the
    device pyrms launches on (its selected device); ValueError naming the culprit otherwise."""
    index = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not t.is_cuda:
            raise ValueError(f"{name} is a {t.device.type} tensor; pyrms.torch runs on CUDA tensors only "
                             f"(move it with {name}.cuda())")
        if index is None:
            index, first = t.get_device(), name
        elif t.get_device() != index:
            raise ValueError(f"{name} is on cuda:{t.get_device()}, but {first} is on cuda:{index}")
    ordinal = driver.selected_device().ordinal
    if index != ordinal:
        raise ValueError(f"the tensors are on cuda:{index}, but pyrms launches on device {ordinal}, its selected "
                         f"device: call pyrms.driver.set_device({index}) first")
    return index


def operands(x: torch.Tensor, vectors: dict, rows: dict | None = None, float32_rows: tuple = ()) -> tuple[str, int]:
    """(pyrms dtype name, device index) of operands that pass every check (check_meta's, then
    check_device's); the error otherwise."""
    name = check_meta(x, vectors, rows, float32_rows)
    return name, check_device({"x": x, **(rows or {}), **vectors})


def ptr(t: torch.Tensor | None) -> int | None:
    """t's device pointer; None for None (an absent weight or bias)."""
    return None if t is None else t.data_ptr()


def row_stride(t: torch.Tensor) -> int | None:
    """Elements between consecutive rows of ``t`` seen as [rows, t.shape[-1]] when one stride addresses
    them all (stride 1 along the last dimension, each leading dimension nested in the next, rows
    disjoint), else None. Size-1 dimensions are ignored, as torch's own contiguity does."""
    shape, strides = t.shape, t.stride()
    hidden = shape[-1]
    if hidden > 1 and strides[-1] != 1:
        return None
    stride = span = None
    for size, step in zip(reversed(shape[:-1]), reversed(strides[:-1])):
        if size == 1:
            continue
        if stride is None:
            stride = step
        elif step != span:
            return None
        span = step * size
    if stride is None:  # a single row
        return hidden
    return stride if stride >= hidden else None


def rows_of(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(t, its row stride), or a contiguous copy of ``t`` and hidden when no one stride addresses its
    rows (say, a transposed or broadcast tensor)."""
    if t.is_contiguous():
        return t, t.shape[-1]
    stride = row_stride(t)
    if stride is None:
        return t.contiguous(), t.shape[-1]
    return t, stride


def in_place_stride(name: str, t: torch.Tensor) -> int:
    """The row stride of a tensor an op writes in place; ValueError when no one stride addresses its rows,
    since an in-place op cannot work on a copy."""
    stride = row_stride(t)
    if stride is None:
        raise ValueError(f"{name} (shape {tuple(t.shape)}, strides {t.stride()}) is not a set of rows one stride "
                         "apart, and an in-place op cannot work on a copy: pass a contiguous tensor")
    return stride


def empty_rows_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new tensor of x's shape and device, of x's dtype or ``dtype``, whose rows lie ``x.shape[-1]`` apart:
    an output. The fake implementations call this too, so that fake and real outputs have the same strides."""
    # empty_like costs the host about half what torch.empty(shape, dtype=..., device=...) does
    if x.is_contiguous():
        return torch.empty_like(x, dtype=dtype)
    return torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)


def parameter_grad_like(x: torch.Tensor, wanted: bool, dtype: torch.dtype | None = None,
                        shape: tuple | None = None) -> torch.Tensor:
    """A parameter gradient's output: [hidden] (or ``shape``: the parameter's, a weight per head) of x's dtype
    (or ``dtype``: the parameter's), or empty where it is not computed. The fake implementations call this
    too, so that fake and real outputs agree."""
    return x.new_empty((shape or (x.shape[-1],)) if wanted else (0,), dtype=dtype)


def mixed(x: torch.Tensor, weight: torch.Tensor | None) -> bool:
    """Whether a weight (parameter) has another dtype than x: fp32 master weights beside bf16 or fp16
    activations under autocast, or any other pair of the supported dtypes. The ops then compute with the
    weight as float32 (bf16 and fp16 convert exactly)."""
    return weight is not None and weight.dtype != x.dtype


def check_backward_meta(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                        per_head: bool = False) -> str:
    """check_meta of a norm backward's operands: a weight of another dtype than x (mixed) is read as float32,
    and grad_out may then be float32 (the gradient of the float32 output such a weight gives); ``per_head``:
    the weight may be one per head (check_meta's)."""
    fp32 = ("grad_out",) if mixed(x, weight) else ()
    return check_meta(x, {"weight": weight}, {"grad_out": grad_out}, float32_rows=fp32, mixed_vectors=("weight",),
                      per_head=("weight",) if per_head else ())


def vector_weight(weight: torch.Tensor | None, hidden: int, device: int, dtype: torch.dtype | None = None) -> bool:
    """The eager hot paths' test of a weight they launch as is: none, or [hidden], contiguous, on ``device``, of
    ``dtype`` (None: any of DTYPE_NAMES). One torch attribute per test, none of them a check that names what
    is wrong: a weight that fails goes through check_meta's."""
    return weight is None or (weight.shape == (hidden,) and weight.get_device() == device and weight.is_contiguous()
                              and (weight.dtype is dtype if dtype is not None else weight.dtype in DTYPE_NAMES))


def per_head(weight: torch.Tensor | None) -> bool:
    """Whether a weight (which check_meta passed) is one per head: [heads, head_dim]."""
    return weight is not None and weight.dim() == 2


def as_float32(t: torch.Tensor | None) -> torch.Tensor | None:
    """t as float32 (itself where it is; bf16 and fp16 convert exactly)."""
    return t if t is None or t.dtype == torch.float32 else t.float()

"""qk_norm_rope's array operands read into the raw-pointer call's pointers and sizes: the fused QKV (2-D
[tokens, row] or 3-D [tokens, heads, head_dim]), the two weights, the fp32 cos_sin_cache and the int64 positions
(read here: pyrms's adapter reads floating-point operands only)."""
from __future__ import annotations

from ... import dtypes
from .. import _adapter, _operands as check


def qkv_array(value, dtype, width: int, heads: int, head_dim: int, token_stride):
    """(view, tokens, token stride) of a qkv array: [tokens, width] or [tokens, heads, head_dim]
    (heads = q + 2 kv heads), contiguous inside a token, any token stride; its dtype must agree with one given."""
    view = _adapter.read("qkv", value, None if dtype is None else dtypes.get(dtype), written=True)
    shape, strides = view.shape, view.strides
    flat = shape[1:] == (width,) and (width == 1 or strides[1] == 1)
    per_head = shape[1:] == (heads, head_dim) and (heads == 1 or strides[1] == head_dim) and (
        head_dim == 1 or strides[2] == 1)
    if not (flat or per_head):
        raise ValueError(f"qkv has shape {shape} and strides {strides} (elements); expected [tokens, {width}] or "
                         f"[tokens, {heads}, {head_dim}] (q, k and v heads), contiguous inside each token")
    tokens = shape[0]
    stride = strides[0] if tokens > 1 else max(strides[0], width)
    if token_stride is not None and tokens > 1 and token_stride != stride:
        raise ValueError(f"token_stride={token_stride} but qkv's token stride is {stride}; leave token_stride out")
    if dtype is not None and dtypes.get(dtype) is not view.dtype:
        raise ValueError(f"qkv has dtype {view.dtype.name}, but the dtype is {dtypes.get(dtype).name}")
    return view, tokens, stride


def weight_array(name: str, value, dt: dtypes.DType, head_dim: int):
    """The view of a [head_dim] weight of qkv's dtype, contiguous."""
    view = _adapter.read(name, value, dt)
    if view.dtype is not dt:
        raise ValueError(f"{name} has dtype {view.dtype.name}, but qkv's is {dt.name}")
    if view.shape != (head_dim,) or (head_dim > 1 and view.strides[0] != 1):
        raise ValueError(f"{name} has shape {view.shape} and strides {view.strides}; expected a contiguous "
                         f"({head_dim},) (head_dim)")
    return view


def cache_array(value, rotary_dim):
    """(view, rotary_dim) of cos_sin_cache: float32 [max_position, rotary_dim], contiguous; rotary_dim defaults to
    its second dimension and must agree with it."""
    view = check.float32_array("cos_sin_cache", value, "cos/sin caches", written=False)
    if len(view.shape) != 2 or view.strides != (view.shape[1], 1) or view.shape[0] == 0:
        raise ValueError(f"cos_sin_cache has shape {view.shape} and strides {view.strides}; expected a contiguous "
                         "float32 [max_position, rotary_dim]")
    if rotary_dim is not None and rotary_dim != view.shape[1]:
        raise ValueError(f"rotary_dim={rotary_dim}, but cos_sin_cache has shape {view.shape} (rotary_dim columns)")
    return view, view.shape[1]


def positions_array(value, tokens: int) -> int:
    """The pointer of an int64 [tokens] positions array, contiguous: a torch tensor or an object with
    __cuda_array_interface__ (typestr '<i8')."""
    kind = type(value)
    if kind.__module__.startswith("torch") and hasattr(value, "data_ptr"):
        if str(value.dtype) != "torch.int64" or value.device.type != "cuda":
            raise ValueError(f"positions must be a CUDA torch.int64 tensor, got {value.dtype} on {value.device}")
        ptr, shape, strides, device = value.data_ptr(), tuple(value.shape), tuple(value.stride()), value.device.index
    elif hasattr(value, "__cuda_array_interface__"):
        cai = value.__cuda_array_interface__
        if cai.get("typestr") != "<i8":
            raise ValueError(f"positions must be int64 (typestr '<i8'), got typestr {cai.get('typestr')!r}")
        ptr, shape = int(cai["data"][0]), tuple(cai["shape"])
        strides = tuple(s // 8 for s in cai["strides"]) if cai.get("strides") else (1,) * len(shape)
        device = None
    else:
        raise TypeError(f"positions must be a device pointer (int), a torch tensor or an object with "
                        f"__cuda_array_interface__, got {kind.__name__}")
    if shape != (tokens,) or (tokens > 1 and strides[0] != 1):
        raise ValueError(f"positions has shape {shape} and strides {strides}; expected a contiguous ({tokens},) "
                         "int64 (one position per token)")
    if ptr == 0:
        raise ValueError("positions has a null data pointer")
    if device is not None:
        check.arrays_on_device({"positions": _adapter.View(ptr, shape, strides, None, device)})
    return ptr

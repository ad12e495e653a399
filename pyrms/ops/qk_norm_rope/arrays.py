"""qk_norm_rope's array operands read into the raw-pointer call's pointers and sizes: the fused QKV (2-D
[tokens, row] or 3-D [tokens, heads, head_dim]), the two weights, the fp32 cos_sin_cache, the int64 positions and
slot_mapping (read here: pyrms's adapter reads floating-point operands only) and the paged KV caches."""
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
    """The pointer of an int64 [tokens] positions array, contiguous (int64_array)."""
    return int64_array("positions", value, tokens, "one position per token")


def int64_array(name: str, value, tokens: int, what: str) -> int:
    """The pointer of an int64 [tokens] array, contiguous: a torch tensor or an object with
    __cuda_array_interface__ (typestr '<i8'); ``what`` says what its elements are, for the shape's message."""
    kind = type(value)
    if kind.__module__.startswith("torch") and hasattr(value, "data_ptr"):
        if str(value.dtype) != "torch.int64" or value.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA torch.int64 tensor, got {value.dtype} on {value.device}")
        ptr, shape, strides, device = value.data_ptr(), tuple(value.shape), tuple(value.stride()), value.device.index
    elif hasattr(value, "__cuda_array_interface__"):
        cai = value.__cuda_array_interface__
        if cai.get("typestr") != "<i8":
            raise ValueError(f"{name} must be int64 (typestr '<i8'), got typestr {cai.get('typestr')!r}")
        ptr, shape = int(cai["data"][0]), tuple(cai["shape"])
        strides = tuple(s // 8 for s in cai["strides"]) if cai.get("strides") else (1,) * len(shape)
        device = None
    else:
        raise TypeError(f"{name} must be a device pointer (int), a torch tensor or an object with "
                        f"__cuda_array_interface__, got {kind.__name__}")
    if shape != (tokens,) or (tokens > 1 and strides[0] != 1):
        raise ValueError(f"{name} has shape {shape} and strides {strides}; expected a contiguous ({tokens},) "
                         f"int64 ({what})")
    if ptr == 0:
        raise ValueError(f"{name} has a null data pointer")
    if device is not None:
        check.arrays_on_device({name: _adapter.View(ptr, shape, strides, None, device)})
    return ptr


def kv_cache_arrays(key_cache, value_cache, element, num_kv_heads: int, head_dim: int, layout: tuple) -> tuple:
    """(key_cache's pointer, value_cache's pointer, (num_blocks, block_size, cache_strides)) of the paged caches
    given as arrays: [num_blocks, block_size, num_kv_heads, head_dim] of ``element`` (qkv's dtype, or
    float8_e4m3fn: torch.float8_e4m3fn, or 1-byte storage such as vLLM's torch.uint8 caches), head_dim contiguous,
    any block, page and head strides, the two of one shape and strides. ``layout``: the (num_blocks, block_size,
    cache_strides) given, each None or agreeing with the arrays'. Either cache may be a raw pointer, laid out as
    the other says."""
    quantized = isinstance(element, dtypes.QuantDType)
    views = {}
    for name, value in (("key_cache", key_cache), ("value_cache", value_cache)):
        if type(value) is int:
            continue
        view = _adapter.read(name, value, element, written=True, quantized=quantized)
        if view.dtype is not element:
            raise ValueError(f"{name} has dtype {view.dtype.name}, but the caches hold {element.name} "
                             "(kv_cache_dtype 'auto': qkv's dtype; 'fp8': float8_e4m3fn)")
        if len(view.shape) != 4 or view.shape[2:] != (num_kv_heads, head_dim) or (
                head_dim > 1 and view.strides[3] != 1) or 0 in view.shape:
            raise ValueError(f"{name} has shape {view.shape} and strides {view.strides}; expected [num_blocks, "
                             f"block_size, {num_kv_heads}, {head_dim}] (num_kv_heads, head_dim), head_dim contiguous")
        views[name] = view
    found = {(v.shape, v.strides[:3]) for v in views.values()}
    if len(found) > 1:
        k, v = views["key_cache"], views["value_cache"]
        raise ValueError(f"key_cache (shape {k.shape}, strides {k.strides}) and value_cache (shape {v.shape}, "
                         f"strides {v.strides}) must have one shape and strides")
    (shape, strides), = found
    for name, given, got in zip(("num_blocks", "block_size", "cache_strides"), layout,
                                (shape[0], shape[1], tuple(strides))):
        if given is not None and (tuple(given) if isinstance(given, (tuple, list)) else given) != got:
            raise ValueError(f"{name}={given!r}, but the caches' is {got!r}; leave {name} out")
    check.arrays_on_device(views)
    return (views["key_cache"].ptr if "key_cache" in views else key_cache,
            views["value_cache"].ptr if "value_cache" in views else value_cache, (shape[0], shape[1], tuple(strides)))

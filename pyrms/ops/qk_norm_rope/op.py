"""``pyrms.qk_norm_rope``: per-head RMSNorm of q and k, then rotary embedding, in place on a fused QKV
and optionally its k and v into a paged KV cache (kernel: cuda_src/qk_norm_rope.cu; the twins:
pyrms.ops.qk_norm_rope.twin.qk_norm_rope_twin and kv_cache_twin)."""
from __future__ import annotations

import numbers
from types import SimpleNamespace
from typing import Any

import numpy as np

from ... import dtypes, launch
from .. import _adapter, _operands as check
from .. import _explain as _explain_path
from .. import _placement
from ..._types import DTypeLike, Operand, OptionalOperand, StreamLike
from .._prepared import Pointers, PreparedCache, use_pdl
from ..rms_norm_quant import arrays as _quant_arrays
from . import arrays as _arrays
from .plan import kv_cache_dtype_arg, plan_qk_norm_rope
from .twin import rotary_dim_arg

_NAMES = ("qkv", "q_weight", "k_weight", "cos_sin_cache", "positions")
_INT64 = dtypes.DType("int64", np.dtype(np.int64), "long long", 8)  # positions' and slot_mapping's element
_ALIGN = 15  # the ALIGNED kernel's pointers: 16 bytes
_PLAIN = (int, float)  # scale kinds the raw-pointer path takes as they are (else: an array, read first)
_ONE = 1.0  # the scales' default (one object: the hot path tells it from a scale given by identity)
_NO_KV = (0, 0, 0, 0, 0, _ONE, _ONE)  # the launch's cache arguments without a cache

# Launch arguments: qkv, q_weight, k_weight, cos_sin_cache, positions, key_cache, value_cache, slot_mapping,
# k_scale_ptr, v_scale_ptr, k_scale, v_scale, epsilon, rows (the call's), then the packed tail heads, q_heads,
# kv_heads, head_dim, rotary_dim, token_stride, block_size, block_stride, page_stride, head_stride (the prepared
# launch's). Without a cache, the cache arguments are _NO_KV and the layout's 1, 0, 0, 0.


def _token_stride(value, width: int) -> int:
    """token_stride: None (width, a contiguous QKV) or an int >= width, the elements of one token's q, k and v."""
    if value is None:
        return width
    value = check.size("token_stride", value, check.INT64_MAX)
    if value < width:
        raise ValueError(f"token_stride must be >= (num_q_heads + 2 * num_kv_heads) * head_dim ({width}), got {value}")
    return value


def _kv_layout(num_kv_heads: int, head_dim: int, num_blocks, block_size, cache_strides) -> tuple:
    """((num_blocks, block_size, (block, page, head) strides), the elements one cache spans) of paged caches
    [num_blocks, block_size, num_kv_heads, head_dim], head_dim contiguous; cache_strides None: contiguous (vLLM's
    NHD layout). TypeError/ValueError naming a bad value."""
    if num_blocks is None or block_size is None:
        raise TypeError(f"num_blocks and block_size are required with raw-pointer caches, got num_blocks="
                        f"{num_blocks!r} and block_size={block_size!r}")
    blocks, size = check.size("num_blocks", num_blocks, check.INT64_MAX), check.size("block_size", block_size)
    if cache_strides is None:
        cache_strides = (size * num_kv_heads * head_dim, num_kv_heads * head_dim, head_dim)
    elif not isinstance(cache_strides, (tuple, list)) or len(cache_strides) != 3:
        raise TypeError(f"cache_strides must be (block_stride, page_stride, head_stride) in elements, got "
                        f"{cache_strides!r}")
    strides = tuple(check.size(f"cache_strides[{i}]", v, check.INT64_MAX) for i, v in enumerate(cache_strides))
    elements = (blocks - 1) * strides[0] + (size - 1) * strides[1] + (num_kv_heads - 1) * strides[2] + head_dim
    if elements > check.INT64_MAX // 16:
        raise ValueError(f"the caches span {elements} elements ({blocks} blocks of strides {strides}): more than "
                         "2^59")
    return (blocks, size, strides), elements


def _unused_kv(kv_cache_dtype, k_scale, v_scale, num_blocks, block_size, cache_strides) -> None:
    """Without caches, their arguments must be left at their defaults: ValueError naming one that is not."""
    given = dict(kv_cache_dtype=(kv_cache_dtype, "auto"), k_scale=(k_scale, 1.0), v_scale=(v_scale, 1.0),
                 num_blocks=(num_blocks, None), block_size=(block_size, None), cache_strides=(cache_strides, None))
    for name, (value, default) in given.items():
        if value is not default and value != default:
            raise ValueError(f"{name} applies with key_cache, value_cache and slot_mapping only, got {name}={value!r}"
                             " and no caches")


class Prepared:
    """One (device, dtype, heads, head_dim, rotary_dim, token stride, options, pdl; with kv_cache the caches' dtype,
    layout (num_blocks, block_size, cache_strides) and which scales are read from memory) of qk_norm_rope, resolved
    once. A call checks the pointers, epsilon, the token count and the scale values; False launches nothing and
    the general path names what is wrong."""

    __slots__ = ("kernel", "aligned", "launch", "pointers", "max_tokens", "heads", "per_block", "placed", "kv",
                 "scales_on_device")

    def __init__(self, device, dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma,
                 pdl, kv_cache=False, kv_cache_dtype="auto", layout=None, scales_on_device=(False, False)):
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        nq, nkv = check.size("num_q_heads", num_q_heads), check.size("num_kv_heads", num_kv_heads)
        self.kv = check.flag("kv_cache", kv_cache)
        p = plan_qk_norm_rope(dt, head_dim, gemma=check.flag("gemma", gemma), is_neox=check.flag("is_neox", is_neox),
                              kv_cache=self.kv, kv_cache_dtype=kv_cache_dtype)
        rot = rotary_dim_arg(rotary_dim, head_dim)
        width = (nq + 2 * nkv) * head_dim
        stride = _token_stride(token_stride, width)
        self.heads = nq + 2 * nkv if self.kv else nq + nkv  # with the cache, the v heads are rows too (copied)
        self.kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        self.aligned = (launch.get_kernel(p.source, p.aligned_expression, p.group, p.signature, device)
                        if p.aligned_layout(stride) else None)
        # qkv's rows (written: q and k, and v read beside the caches); the weights, the cos/sin cache's first row
        # (its rows are not known), positions
        operands = [(dt.itemsize, stride, self.heads * head_dim), (dt.itemsize, 0), (dt.itemsize, 0), (4, 0, rot),
                    (8, 1, 1)]
        written = [0]
        cache_tail = (1, 0, 0, 0)
        self.scales_on_device: tuple[bool, ...] = (False, False)
        if self.kv:
            (_, block_size, strides), elements = _kv_layout(nkv, head_dim, *layout)
            cache_tail = (block_size, *strides)
            item = p.kv_element.itemsize
            written += [len(operands), len(operands) + 1]
            operands += [(item, 0, elements), (item, 0, elements), (8, 1, 1)]  # the caches, slot_mapping
            self.scales_on_device = tuple(check.flag("scales_on_device", f) for f in scales_on_device)
            operands += [(4, 0, 1)] * sum(self.scales_on_device)  # k_scale, v_scale read from memory
        elif layout is not None or scales_on_device != (False, False):
            raise ValueError("a cache layout and device scales apply with kv_cache only")
        self.launch = launch.RowLaunch(p.signature, p.block, (self.heads, nq, nkv, head_dim, rot, stride, *cache_tail),
                                       device, pdl=use_pdl(device, pdl))
        self.per_block = p.rows_per_block
        self.max_tokens = min(check.max_rows(width, stride), check.INT32_MAX // self.heads)
        pairs = {(min(i, j), max(i, j)) for i in written for j in range(len(operands)) if i != j}
        self.pointers = Pointers(head_dim, operands, [(i, j, False) for i, j in sorted(pairs)])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, epsilon, num_tokens, stream, scales=(1.0, 1.0)) -> bool:
        """pointers: qkv, q_weight, k_weight, cos_sin_cache, positions, and with kv_cache key_cache, value_cache,
        slot_mapping and the device scales (k's, v's) that there are; scales: (k_scale, v_scale) values (those
        read from memory: any)."""
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_tokens and type(epsilon) is float
                and 0.0 <= epsilon <= check.FLOAT32_MAX and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        qkv, q_weight, k_weight = pointers[:3]
        kernel = self.aligned if self.aligned is not None and not (qkv | q_weight | k_weight) & _ALIGN else self.kernel
        rows = num_tokens * self.heads
        if self.kv:
            k_on, v_on = self.scales_on_device  # a scale read from memory: its pointer follows slot_mapping's
            k_scale, v_scale = scales
            if not ((k_on or _scale_ok(k_scale)) and (v_on or _scale_ok(v_scale))):
                return False
            self.launch(kernel, -(-rows // self.per_block), handle, *pointers[:8], pointers[8] if k_on else 0,
                        pointers[8 + k_on] if v_on else 0, 1.0 if k_on else k_scale, 1.0 if v_on else v_scale,
                        epsilon, rows)
        else:
            self.launch(kernel, -(-rows // self.per_block), handle, *pointers, *_NO_KV, epsilon, rows)
        return True


def _scale_ok(value) -> bool:
    """A scale given as a value: a float, finite and > 0 in float32 (NaN fails)."""
    return type(value) is float and check.FLOAT32_TINY <= value <= check.FLOAT32_MAX


_prepared = PreparedCache(Prepared)


def qk_norm_rope(qkv: Operand, q_weight: Operand, k_weight: Operand, cos_sin_cache: Operand, positions: Operand, *,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int | None = None,
                 is_neox: bool = True, epsilon: float = 1e-6, gemma: bool = False, num_tokens: int | None = None,
                 token_stride: int | None = None, dtype: DTypeLike | None = None,
                 key_cache: OptionalOperand = None, value_cache: OptionalOperand = None,
                 slot_mapping: OptionalOperand = None, kv_cache_dtype: str = "auto",
                 k_scale: float | Operand = _ONE, v_scale: float | Operand = _ONE, num_blocks: int | None = None,
                 block_size: int | None = None, cache_strides: tuple[int, int, int] | None = None,
                 stream: StreamLike = None, pdl: bool = True) -> None:
    """QK-norm then rotary embedding, in place on the q and k heads of a fused QKV: vLLM's
    ``fused_qk_norm_rope`` (csrc/fused_qknorm_rope_kernel.cu), bit for bit
    ``pyrms.ops.qk_norm_rope.twin.qk_norm_rope_twin``; with ``key_cache``, ``value_cache`` and ``slot_mapping``
    also vLLM's ``reshape_and_cache_flash`` of the token's k and v after it, in the same launch. For each token t
    and each of its q heads (then k heads) x, of ``head_dim`` elements:

    - ``a = x * inv_rms * w``, ``inv_rms = 1 / sqrt(mean(x^2) + epsilon)``, w = q_weight (k_weight for a k head),
      or 1 + w with ``gemma``; the sum of squares in fp32 in the RMSNorm row's reduction tree (as the
      family's RMSNorm of the same head at the same alignment);
    - then the rotation by position p = positions[t]: with c_k = cos_sin_cache[p, k] and
      s_k = cos_sin_cache[p, rotary_dim/2 + k], each pair (i, j) of frequency k becomes
      (a_i c_k - a_j s_k, a_j c_k + a_i s_k); NeoX pairs (``is_neox``, rotate-half) are (k, k + rotary_dim/2),
      GPT-J's (interleaved) (2k, 2k + 1); elements from ``rotary_dim`` on pass through, normalized.

    Rounding: the normalized head stays in fp32 through the rotation and is rounded to the storage dtype once,
    at the store, as vLLM's and FlashInfer's fused kernels keep it; each product and sum is one correctly rounded
    fp32 operation (no FMA). vLLM multiplies x by (inv_rms * w), pyrms (x * inv_rms) by w (the RMSNorm row's
    order); vLLM computes inv_rms with rsqrtf, pyrms correctly rounded; so results may differ from vLLM's in the
    last bit. v's heads are not touched.

    ``qkv``: a device pointer (int) to ``num_tokens`` tokens of ``token_stride`` (default (num_q_heads +
    2 * num_kv_heads) * head_dim) elements of ``dtype`` (bfloat16, the default, float16 or float32), or an array
    [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] or [tokens, num_q_heads + 2 * num_kv_heads, head_dim],
    contiguous inside a token, any token stride (a strided view of a larger buffer). ``q_weight``, ``k_weight``:
    [head_dim] of qkv's dtype. ``cos_sin_cache``: float32 [max_position, rotary_dim], cos in the first half of
    each row, sin in the second (vLLM's ``RotaryEmbedding.cos_sin_cache``); ``rotary_dim`` (even, at most
    head_dim) defaults to an array cache's second dimension, else head_dim. ``positions``: int64 [num_tokens],
    a device pointer, a torch tensor or an array with ``__cuda_array_interface__``; each must be a row of the
    cache (not checked: a device value, as in vLLM).

    The paged KV cache (all three of ``key_cache``, ``value_cache`` and ``slot_mapping``, or none): token t
    with slot = slot_mapping[t] >= 0 (int64 [num_tokens], as positions; a negative slot is a padding token:
    nothing is written to the caches for it, its q and k are still rewritten) writes its num_kv_heads k heads,
    as this op leaves them, into key_cache[slot // block_size, slot % block_size] and its v heads, copied, into
    value_cache there: vLLM's flash layout [num_blocks, block_size, num_kv_heads, head_dim], head_dim contiguous,
    any block, page and head strides (the two caches of one layout; ``cache_strides``, in elements, default
    contiguous; a layout that maps two heads onto overlapping memory is not refused). Arrays say their layout
    (num_blocks, block_size and cache_strides then default to theirs and must agree); raw-pointer caches need
    ``num_blocks`` and ``block_size``. ``kv_cache_dtype``: 'auto', the caches hold qkv's dtype, the values as
    they are; 'fp8' or 'fp8_e4m3', they hold float8_e4m3fn (torch.float8_e4m3fn, or 1-byte storage such as
    vLLM's torch.uint8 caches): each value x becomes fp8(float(x) / scale), the division correctly rounded, round
    to nearest even, saturating to +-448, NaN as 0x7F (vLLM's scaled_convert), the scale ``k_scale`` for k and
    ``v_scale`` for v: a float (finite, > 0 in float32), or one fp32 the kernel reads (its value not checked, as
    vLLM's scale tensors): a device pointer (int) or a float32 array of one element. Bit for bit, the caches
    hold what this op then ``reshape_and_cache_flash`` would write (``kv_cache_twin``). Slots are not checked
    against the cache's blocks (device values, as in vLLM); two tokens of one slot leave either's values.

    Every pointer at any element alignment; what is written (qkv, the caches) must not overlap another operand.
    ``stream``, ``pdl``: as every pyrms op takes them. Everything else is validated before the launch; the
    launch is asynchronous on ``stream``.
    """
    views: dict[str, Any] = {}  # the arrays given, whose device is checked once they are all read
    if type(qkv) is not int:
        heads = check.size("num_q_heads", num_q_heads) + 2 * check.size("num_kv_heads", num_kv_heads)
        head_dim = check.size("head_dim", head_dim)
        views["qkv"], tokens, token_stride = _arrays.qkv_array(qkv, dtype, heads * head_dim, heads, head_dim,
                                                               token_stride)
        if num_tokens is not None and num_tokens != tokens:
            raise ValueError(f"num_tokens={num_tokens}, but qkv has {tokens} tokens")
        num_tokens, qkv = tokens, views["qkv"].ptr
        dtype = dt = dtypes.get(views["qkv"].dtype)
        if num_tokens == 0:
            return
        if type(q_weight) is not int:
            views["q_weight"] = _arrays.weight_array("q_weight", q_weight, dt, head_dim)
            q_weight = views["q_weight"].ptr
        if type(k_weight) is not int:
            views["k_weight"] = _arrays.weight_array("k_weight", k_weight, dt, head_dim)
            k_weight = views["k_weight"].ptr
    if type(cos_sin_cache) is not int:
        views["cos_sin_cache"], rotary_dim = _arrays.cache_array(cos_sin_cache, rotary_dim)
        cos_sin_cache = views["cos_sin_cache"].ptr
    if type(positions) is not int and num_tokens is not None:
        positions = _arrays.positions_array(positions, num_tokens)
    if views:
        check.arrays_on_device(views)
    pointers: tuple[Any, ...] = (qkv, q_weight, k_weight, cos_sin_cache, positions)
    static: tuple[Any, ...] = (dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma,
                               pdl)
    kv = key_cache is not None or value_cache is not None or slot_mapping is not None
    scales = (k_scale, v_scale)
    if kv:
        layout: tuple[Any, ...] = (num_blocks, block_size, cache_strides)
        if not (type(key_cache) is int and type(value_cache) is int and type(slot_mapping) is int
                and type(k_scale) in _PLAIN and type(v_scale) in _PLAIN and not isinstance(cache_strides, list)):
            key_cache, value_cache, slot_mapping, k_scale, v_scale, layout = _kv_arrays(
                key_cache, value_cache, slot_mapping, k_scale, v_scale, kv_cache_dtype, dtype, num_q_heads,
                num_kv_heads, head_dim, num_tokens, layout)
        scales = (_scale_arg(k_scale), _scale_arg(v_scale))
        device = (type(k_scale) is int, type(v_scale) is int)
        pointers += (key_cache, value_cache, slot_mapping, *(v for v in (k_scale, v_scale) if type(v) is int))
        static += (True, kv_cache_dtype, layout, device)
        prepared = _prepared.get(*static)
        if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, epsilon, num_tokens,
                                                                                         stream, scales):
            return
    else:
        if (kv_cache_dtype != "auto" or k_scale is not _ONE or v_scale is not _ONE or num_blocks is not None
                or block_size is not None or cache_strides is not None):
            _unused_kv(kv_cache_dtype, k_scale, v_scale, num_blocks, block_size, cache_strides)
        prepared = _prepared.get(*static)
        if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, epsilon, num_tokens,
                                                                                         stream):
            return
    _explain(pointers, epsilon, num_tokens, static, stream, scales)
    launched = _prepared.require(*static)(pointers, float(epsilon), check.size("num_tokens", num_tokens), stream,
                                          scales)
    assert launched, "the checks above accept what the prepared launch declines"


def _kv_arrays(key_cache, value_cache, slot_mapping, k_scale, v_scale, kv_cache_dtype, dtype, num_q_heads,
               num_kv_heads, head_dim, num_tokens, layout) -> tuple:
    """(key_cache, value_cache, slot_mapping, k_scale, v_scale, layout) of the raw-pointer call: arrays read into
    pointers (the caches' layout from theirs), a scale array into its pointer, the rest as given for the checks
    after. layout: (num_blocks, block_size, cache_strides)."""
    if key_cache is None or value_cache is None or slot_mapping is None:
        given = ", ".join(n for n, v in (("key_cache", key_cache), ("value_cache", value_cache),
                                         ("slot_mapping", slot_mapping)) if v is not None)
        raise ValueError(f"key_cache, value_cache and slot_mapping go together; got only {given}")
    if type(key_cache) is not int or type(value_cache) is not int:
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        kind = kv_cache_dtype_arg(kv_cache_dtype)
        element = dt if kind == "auto" else dtypes.FLOAT8_E4M3FN
        key_cache, value_cache, layout = _arrays.kv_cache_arrays(
            key_cache, value_cache, element, check.size("num_kv_heads", num_kv_heads), check.size("head_dim", head_dim),
            layout)
    if type(slot_mapping) is not int and num_tokens is not None:
        slot_mapping = _arrays.int64_array("slot_mapping", slot_mapping, num_tokens, "one cache slot per token")
    k_scale, v_scale = (_quant_arrays.scalar_array(name, value) if _adapter.is_array(value) else value
                        for name, value in (("k_scale", k_scale), ("v_scale", v_scale)))
    num_blocks, block_size, strides = layout
    strides = tuple(strides) if type(strides) is list else strides  # hashable: a key of the prepared launches
    return key_cache, value_cache, slot_mapping, k_scale, v_scale, (num_blocks, block_size, strides)


def _scale_arg(value):
    """The kernel's value of a scale: any for one read from memory (a pointer), a real number as a float; anything
    else as it is, for the checks to name."""
    if type(value) is int:
        return 1.0
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else value


def _explain(pointers, epsilon, num_tokens, static, stream, scales) -> None:
    """Raise the error that names what the prepared launch declined (the shared explain path)."""
    dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma, pdl = static[:9]
    kv_cache, kv_cache_dtype, layout, on_device = static[9:] or (False, "auto", None, (False, False))
    call = dict(zip(_NAMES, pointers), key_cache=None, value_cache=None, slot_mapping=None, k_scale=None,
                v_scale=None)
    if kv_cache:
        call.update(zip(("key_cache", "value_cache", "slot_mapping"), pointers[5:8]))
        rest = iter(pointers[8:])
        call.update((name, next(rest)) for name, given in zip(("k_scale", "v_scale"), on_device) if given)
    _explain_path.explain(_DECLARATION, dict(call, epsilon=epsilon, num_tokens=num_tokens, hidden_size=head_dim,
                                             dtype=dtype, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
                                             rotary_dim=rotary_dim, token_stride=token_stride, is_neox=is_neox,
                                             gemma=gemma, pdl=pdl, stream=stream, kv_cache=kv_cache,
                                             kv_cache_dtype=kv_cache_dtype, layout=layout, on_device=on_device,
                                             scales=scales))


def _sizes(num_tokens, head_dim) -> tuple[int, int]:
    """The call's tokens and head_dim (a raw qkv says nothing of its tokens: num_tokens is required)."""
    if num_tokens is None:
        raise TypeError("num_tokens is required when qkv is a raw pointer")
    return check.size("num_tokens", num_tokens), check.size("head_dim", head_dim)


def _facts(call: dict, tokens: int, head_dim: int) -> SimpleNamespace:
    """qk_norm_rope's own checks for the shared explain path: the head counts, the plan's options, rotary_dim,
    token_stride, the caches' dtype, layout and scale values, and the heads' index range; the dtype and the
    operands' spans that follow from them."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    nq, nkv = check.size("num_q_heads", call["num_q_heads"]), check.size("num_kv_heads", call["num_kv_heads"])
    kv = call["kv_cache"]
    p = plan_qk_norm_rope(dt, head_dim, gemma=call["gemma"], is_neox=call["is_neox"], kv_cache=kv,
                          kv_cache_dtype=call["kv_cache_dtype"])
    rot = rotary_dim_arg(call["rotary_dim"], head_dim)
    stride = _token_stride(call["token_stride"], (nq + 2 * nkv) * head_dim)
    heads = nq + 2 * nkv if kv else nq + nkv
    if tokens * heads > check.INT32_MAX:
        raise ValueError(f"num_tokens * (num_q_heads + {'2 * ' if kv else ''}num_kv_heads) must be at most "
                         f"{check.INT32_MAX}, got {tokens} * {heads}")
    kv_span = None
    if kv:
        _, elements = _kv_layout(nkv, head_dim, *call["layout"])
        kv_span = (0, elements)
        for name, value, on_device in zip(("k_scale", "v_scale"), call["scales"], call["on_device"]):
            if not on_device:
                check.scale_value(name, value)
    return SimpleNamespace(dtype=dt, qkv_span=(stride, heads * head_dim), cache_span=(0, rot),
                           kv_element=p.kv_element if kv else None, kv_span=kv_span)


# qkv (its q and k heads rewritten in place) first, so that overlaps read "qkv and ..."; the weights [head_dim];
# with kv_cache, the caches (written, as one span each) and what they read.
_DECLARATION = _explain_path.Declaration(
    operands=(_explain_path.Memory("qkv", span=_explain_path.Fact("qkv_span"), written=True),
              _explain_path.Memory("key_cache", _explain_path.Fact("kv_element"), span=_explain_path.Fact("kv_span"),
                                   written=True, optional=True),
              _explain_path.Memory("value_cache", _explain_path.Fact("kv_element"),
                                   span=_explain_path.Fact("kv_span"), written=True, optional=True),
              _explain_path.Memory("q_weight"), _explain_path.Memory("k_weight"),
              _explain_path.Memory("cos_sin_cache", dtypes.FLOAT32, span=_explain_path.Fact("cache_span")),
              _explain_path.Memory("positions", _INT64, span=_explain_path.PER_ROW),
              _explain_path.Memory("slot_mapping", _INT64, span=_explain_path.PER_ROW, optional=True),
              _explain_path.Memory("k_scale", dtypes.FLOAT32, span=_explain_path.ONE, optional=True),
              _explain_path.Memory("v_scale", dtypes.FLOAT32, span=_explain_path.ONE, optional=True)),
    facts=_facts, flags=("pdl", "gemma", "is_neox"), its_elements=True, sizes=_sizes)

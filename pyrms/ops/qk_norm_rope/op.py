"""``pyrms.qk_norm_rope``: per-head RMSNorm of q and k, then rotary embedding, in place on a fused QKV
(kernel: cuda_src/qk_norm_rope.cu; the twin: pyrms.ops.qk_norm_rope.twin.qk_norm_rope_twin)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ... import dtypes, launch
from .. import _operands as check
from .. import _explain as _explain_path
from .. import _placement
from ..._types import DTypeLike, Operand, StreamLike
from .._prepared import Pointers, PreparedCache, use_pdl
from . import arrays as _arrays
from .plan import plan_qk_norm_rope
from .twin import rotary_dim_arg

_NAMES = ("qkv", "q_weight", "k_weight", "cos_sin_cache", "positions")
_INT64 = dtypes.DType("int64", np.dtype(np.int64), "long long", 8)  # the positions' element, for the explain path
_ALIGN = 15  # the ALIGNED kernel's pointers: 16 bytes

# Launch arguments: qkv, q_weight, k_weight, cos_sin_cache, positions, epsilon, rows (the call's), then the
# packed tail heads, q_heads, head_dim, rotary_dim, token_stride (the prepared launch's).


def _token_stride(value, width: int) -> int:
    """token_stride: None (width, a contiguous QKV) or an int >= width, the elements of one token's q, k and v."""
    if value is None:
        return width
    value = check.size("token_stride", value, check.INT64_MAX)
    if value < width:
        raise ValueError(f"token_stride must be >= (num_q_heads + 2 * num_kv_heads) * head_dim ({width}), got {value}")
    return value


class Prepared:
    """One (device, dtype, heads, head_dim, rotary_dim, token stride, options, pdl) of qk_norm_rope, resolved once.
    A call checks the pointers, epsilon and the token count; False launches nothing and the general path names
    what is wrong."""

    __slots__ = ("kernel", "aligned", "launch", "pointers", "max_tokens", "heads", "per_block", "placed")

    def __init__(self, device, dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma,
                 pdl):
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        nq, nkv = check.size("num_q_heads", num_q_heads), check.size("num_kv_heads", num_kv_heads)
        p = plan_qk_norm_rope(dt, head_dim, gemma=check.flag("gemma", gemma), is_neox=check.flag("is_neox", is_neox))
        rot = rotary_dim_arg(rotary_dim, head_dim)
        width = (nq + 2 * nkv) * head_dim
        stride = _token_stride(token_stride, width)
        self.heads = nq + nkv
        self.kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        self.aligned = (launch.get_kernel(p.source, p.aligned_expression, p.group, p.signature, device)
                        if p.aligned_layout(stride) else None)
        self.launch = launch.RowLaunch(p.signature, p.block, (self.heads, nq, head_dim, rot, stride), device,
                                       pdl=use_pdl(device, pdl))
        self.per_block = p.rows_per_block
        self.max_tokens = min(check.max_rows(width, stride), check.INT32_MAX // self.heads)
        # qkv's q and k heads (written); the weights, the cache's first row (its rows are not known), positions
        operands = [(dt.itemsize, stride, self.heads * head_dim), (dt.itemsize, 0), (dt.itemsize, 0), (4, 0, rot),
                    (8, 1, 1)]
        self.pointers = Pointers(head_dim, operands, [(0, j, False) for j in range(1, len(operands))])
        self.placed = _placement.for_device(device)

    def __call__(self, pointers: tuple, epsilon, num_tokens, stream) -> bool:
        """pointers: qkv, q_weight, k_weight, cos_sin_cache, positions."""
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_tokens and type(epsilon) is float
                and 0.0 <= epsilon <= check.FLOAT32_MAX and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        qkv, q_weight, k_weight = pointers[:3]
        kernel = self.aligned if self.aligned is not None and not (qkv | q_weight | k_weight) & _ALIGN else self.kernel
        rows = num_tokens * self.heads
        self.launch(kernel, -(-rows // self.per_block), handle, *pointers, epsilon, rows)
        return True


_prepared = PreparedCache(Prepared)


def qk_norm_rope(qkv: Operand, q_weight: Operand, k_weight: Operand, cos_sin_cache: Operand, positions: Operand, *,
                 num_q_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int | None = None,
                 is_neox: bool = True, epsilon: float = 1e-6, gemma: bool = False, num_tokens: int | None = None,
                 token_stride: int | None = None, dtype: DTypeLike | None = None, stream: StreamLike = None,
                 pdl: bool = True) -> None:
    """QK-norm then rotary embedding, in place on the q and k heads of a fused QKV: vLLM's
    ``fused_qk_norm_rope`` (csrc/fused_qknorm_rope_kernel.cu), bit for bit
    ``pyrms.ops.qk_norm_rope.twin.qk_norm_rope_twin``. For each token t and each of its q heads (then k heads)
    x, of ``head_dim`` elements:

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
    last bit. v's heads are not touched. Writing k and v into a paged KV cache is not fused here.

    ``qkv``: a device pointer (int) to ``num_tokens`` tokens of ``token_stride`` (default (num_q_heads +
    2 * num_kv_heads) * head_dim) elements of ``dtype`` (bfloat16, the default, float16 or float32), or an array
    [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] or [tokens, num_q_heads + 2 * num_kv_heads, head_dim],
    contiguous inside a token, any token stride (a strided view of a larger buffer). ``q_weight``, ``k_weight``:
    [head_dim] of qkv's dtype. ``cos_sin_cache``: float32 [max_position, rotary_dim], cos in the first half of
    each row, sin in the second (vLLM's ``RotaryEmbedding.cos_sin_cache``); ``rotary_dim`` (even, at most
    head_dim) defaults to an array cache's second dimension, else head_dim. ``positions``: int64 [num_tokens],
    a device pointer, a torch tensor or an array with ``__cuda_array_interface__``; each must be a row of the
    cache (not checked: a device value, as in vLLM). Every pointer at any element alignment; qkv must not overlap
    another operand. ``stream``, ``pdl``: as every pyrms op takes them. Everything else is validated before the
    launch; the launch is asynchronous on ``stream``.
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
    static = (dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma, pdl)
    prepared = _prepared.get(*static)
    if prepared is not None and all(type(p) is int for p in pointers) and prepared(pointers, epsilon, num_tokens,
                                                                                     stream):
        return
    _explain(pointers, epsilon, num_tokens, static, stream)
    launched = _prepared.require(*static)(pointers, float(epsilon), check.size("num_tokens", num_tokens), stream)
    assert launched, "the checks above accept what the prepared launch declines"


def _explain(pointers, epsilon, num_tokens, static, stream) -> None:
    """Raise the error that names what the prepared launch declined (the shared explain path)."""
    dtype, num_q_heads, num_kv_heads, head_dim, rotary_dim, token_stride, is_neox, gemma, pdl = static
    _explain_path.explain(_DECLARATION, dict(zip(_NAMES, pointers), epsilon=epsilon, num_tokens=num_tokens,
                                             hidden_size=head_dim, dtype=dtype, num_q_heads=num_q_heads,
                                             num_kv_heads=num_kv_heads, rotary_dim=rotary_dim,
                                             token_stride=token_stride, is_neox=is_neox, gemma=gemma, pdl=pdl,
                                             stream=stream))


def _sizes(num_tokens, head_dim) -> tuple[int, int]:
    """The call's tokens and head_dim (a raw qkv says nothing of its tokens: num_tokens is required)."""
    if num_tokens is None:
        raise TypeError("num_tokens is required when qkv is a raw pointer")
    return check.size("num_tokens", num_tokens), check.size("head_dim", head_dim)


def _facts(call: dict, tokens: int, head_dim: int) -> SimpleNamespace:
    """qk_norm_rope's own checks for the shared explain path: the head counts, the plan's options, rotary_dim,
    token_stride and the heads' index range; the dtype and the operands' spans that follow from them."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    nq, nkv = check.size("num_q_heads", call["num_q_heads"]), check.size("num_kv_heads", call["num_kv_heads"])
    plan_qk_norm_rope(dt, head_dim, gemma=call["gemma"], is_neox=call["is_neox"])
    rot = rotary_dim_arg(call["rotary_dim"], head_dim)
    stride = _token_stride(call["token_stride"], (nq + 2 * nkv) * head_dim)
    if tokens * (nq + nkv) > check.INT32_MAX:
        raise ValueError(f"num_tokens * (num_q_heads + num_kv_heads) must be at most {check.INT32_MAX}, got "
                         f"{tokens} * {nq + nkv}")
    return SimpleNamespace(dtype=dt, qkv_span=(stride, (nq + nkv) * head_dim), cache_span=(0, rot))


# qkv (its q and k heads rewritten in place) first, so that overlaps read "qkv and ..."; the weights [head_dim].
_DECLARATION = _explain_path.Declaration(
    operands=(_explain_path.Memory("qkv", span=_explain_path.Fact("qkv_span"), written=True),
              _explain_path.Memory("q_weight"), _explain_path.Memory("k_weight"),
              _explain_path.Memory("cos_sin_cache", dtypes.FLOAT32, span=_explain_path.Fact("cache_span")),
              _explain_path.Memory("positions", _INT64, span=_explain_path.PER_ROW)),
    facts=_facts, flags=("pdl", "gemma", "is_neox"), its_elements=True, sizes=_sizes)

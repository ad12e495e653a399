"""qk_norm_rope's launch plan: pure, no GPU. The heads are RMSNorm rows of head_dim elements packed several
to a warp, in the shape (and so the reduction tree) that the row core's packed rows take for (dtype, head_dim):
pyrms/ops/_row_plan.py's packed_shape of the row plan's block and cache."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from ...contract import KernelPlan
from .._row_plan import PACKED_SHAPES, PACKED_THREADS, block_and_cache, packed_shape


@dataclass(frozen=True)
class QkNormRopePlan(KernelPlan):
    """qk_norm_rope.cu's kernel for heads of ``head_dim`` elements of ``dtype``: ``lanes`` lanes per head,
    each holding ``cache`` vectors; the sum of squares folds over ``fold`` = 32 positions (the row core's F)."""

    dtype: dtypes.DType
    head_dim: int
    lanes: int
    cache: int
    gemma: bool = False
    is_neox: bool = True
    kv_cache: bool = False
    kv_cache_dtype: str = "auto"  # with kv_cache: KV_CACHE_DTYPES' canonical name

    source = "qk_norm_rope.cu"
    kernel = "qk_norm_rope_kernel"
    FLAGS = ("gemma", "is_neox", "kv_cache")  # the kernel's bool template flags, in template order
    block = PACKED_THREADS  # threads per block
    fold = 32  # the reduction tree's fold width (the twin's block)

    @property
    def rows_per_block(self) -> int:
        return PACKED_THREADS // self.lanes

    @property
    def kv_element(self):
        """The caches' element: qkv's dtype ('auto') or float8_e4m3fn ('fp8_e4m3')."""
        return self.dtype if self.kv_cache_dtype == "auto" else dtypes.FLOAT8_E4M3FN

    def _expression(self, lanes: int, cache: int, aligned: bool, kv_cache_dtype: str) -> str:
        kv = self.dtype if kv_cache_dtype == "auto" else dtypes.FLOAT8_E4M3FN
        return self.contract.expression(T=self.dtype.ctype, CACHE=cache, LANES=lanes, ALIGNED=aligned,
                                        GEMMA=self.gemma, IS_NEOX=self.is_neox, KV_CACHE=self.kv_cache, KV=kv.ctype)

    @property
    def expression(self) -> str:
        """The kernel for any element-aligned operands."""
        return self._expression(self.lanes, self.cache, False, self.kv_cache_dtype)

    @property
    def aligned_expression(self) -> str:
        """The kernel for 16-byte aligned qkv and weights, head_dim and token stride whole vectors (ALIGNED)."""
        return self._expression(self.lanes, self.cache, True, self.kv_cache_dtype)

    def aligned_layout(self, token_stride: int) -> bool:
        """Whether heads at this token stride (elements) can take the ALIGNED kernel, given aligned pointers."""
        return self.head_dim % self.dtype.vec_elems == 0 and token_stride % self.dtype.vec_elems == 0

    @property
    def group(self) -> tuple[str, ...]:
        """Every packed shape of one (dtype, gemma, is_neox, kv_cache), aligned or not, and with kv_cache both cache
        dtypes: one NVRTC run whatever head_dim and cache dtype."""
        kinds = KV_CACHE_DTYPES if self.kv_cache else ("auto",)
        return tuple(self._expression(n, c, a, k) for k in kinds for n, c in PACKED_SHAPES for a in (False, True))


# The caches' dtypes, canonical: "auto" (qkv's dtype) and "fp8_e4m3" (float8_e4m3fn through a scale);
# vLLM's kv_cache_dtype spellings of them.
KV_CACHE_DTYPES = ("auto", "fp8_e4m3")
_KV_CACHE_SPELLINGS = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"}


def kv_cache_dtype_arg(value) -> str:
    """The canonical name of a kv_cache_dtype ('auto', 'fp8' or 'fp8_e4m3', vLLM's names); ValueError naming it
    and what is allowed otherwise."""
    found = _KV_CACHE_SPELLINGS.get(value) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join(map(repr, _KV_CACHE_SPELLINGS))}, got {value!r}")
    return found


def plan_qk_norm_rope(dtype, head_dim: int, *, gemma: bool = False, is_neox: bool = True, kv_cache: bool = False,
                      kv_cache_dtype: str = "auto") -> QkNormRopePlan:
    """The plan for heads of ``head_dim`` elements of ``dtype`` (bfloat16, float16 or float32), with ``kv_cache``
    the k and v heads also written into paged caches of ``kv_cache_dtype`` (kv_cache_dtype_arg); ValueError for
    another dtype, cache dtype or a head too long to pack into one warp (more than 32 * 4 vectors)."""
    kv_kind = kv_cache_dtype_arg(kv_cache_dtype)
    dt = dtypes.get(dtype)
    if isinstance(head_dim, bool) or type(head_dim) is not int or head_dim <= 0:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    lanes, cache = packed_shape(dt, head_dim, *block_and_cache(dt, head_dim))
    if not lanes:
        raise ValueError(f"head_dim must be at most {32 * 4 * dt.vec_elems} for {dt.name} (one warp per head), "
                         f"got {head_dim}")
    return QkNormRopePlan(dt, head_dim, lanes, cache, bool(gemma), bool(is_neox), bool(kv_cache),
                          kv_kind if kv_cache else "auto")

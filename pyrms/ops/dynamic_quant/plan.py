"""dynamic_quant's launch plan: pure, no GPU. One block per row (its threads cover the row's output vectors, at
most MAX_BLOCK, as static_quant's); per tensor, the maxima launches before it (dynamic_quant.cu)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes
from ...contract import Contract, KernelPlan, contract
from ..rms_norm_quant.plan import group_size_for
from ..static_quant.plan import block_for

# The modes, and each one's MODE in cuda_src/quant.cuh's QuantMode.
DYNAMIC_MODES = ("per_tensor", "per_token", "per_group")
_MODE_VALUES = {"per_tensor": 3, "per_token": 1, "per_group": 2}

# dynamic_quant.cu's DYNAMIC_QUANT_MAX_GROUPS: a row's group maxima are kept in static shared memory.
MAX_GROUPS = 1024

# Per tensor: the blocks of the maxima launch at most (they loop over the rows past it). Any count gives the same
# bits (a maximum is exact); this one fills an H200 several times over without folding more atomics than needed.
MAX_AMAX_BLOCKS = 1024

# Per group: vLLM's per_token_group_quant_fp8 floors each group's amax at its eps (1e-10); UE8M0 rounds the scale
# at or above the same 1e-10 (dynamic_quant.cu).
GROUP_EPS = np.float32(1e-10)


def scale_floor(mode: str, out_dtype) -> np.float32:
    """The least scale of ``mode`` (the kernels' `floor`; dynamic_quant.cu says why each): per tensor 2^-126, per
    token the fp8 min_scale (1/(qmax * 512)) and 0 for int8, per group fl(1e-10 / qmax)."""
    qt = dtypes.quantized(out_dtype)
    if mode == "per_tensor":
        return np.float32(2.0 ** -126)
    if mode == "per_token":
        return np.float32(0.0) if qt.integer else qt.min_scale
    if mode == "per_group":
        return GROUP_EPS / qt.qmax
    raise ValueError(f"mode must be one of {DYNAMIC_MODES}, got {mode!r}")


@dataclass(frozen=True)
class DynamicQuantPlan(KernelPlan):
    """dynamic_quant.cu's kernels for rows of ``dtype`` quantized to ``out_dtype`` in ``mode``: ``block`` threads
    per row; ``group_size`` elements per group (per group; 0 otherwise)."""

    dtype: dtypes.DType
    hidden: int
    out_dtype: dtypes.QuantDType
    mode: str
    group_size: int
    block: int

    source = "dynamic_quant.cu"
    kernel = "dynamic_quant_kernel"
    amax_kernel = "dynamic_quant_amax_kernel"  # per tensor: the launches before the kernel (clear, then maxima)
    FLAGS: tuple[str, ...] = ()  # no bool template flags

    @property
    def expression(self) -> str:
        """The NVRTC name expression of the row kernel this plan launches."""
        return self.contract.expression(T=self.dtype.ctype, Q=self.out_dtype.ctype, MODE=_MODE_VALUES[self.mode])

    @property
    def amax_contract(self) -> Contract:
        """The maxima kernel's template and launch parameters (per tensor)."""
        return contract(self.source, self.amax_kernel)

    @property
    def amax_expression(self) -> str:
        """The NVRTC name expression of the maxima kernel (per tensor)."""
        return self.amax_contract.expression(T=self.dtype.ctype, Q=self.out_dtype.ctype)

    @property
    def group(self) -> tuple[str, ...]:
        """The unit's name expressions: every mode's kernel of (dtype, out_dtype) and the maxima kernel, whatever
        the hidden size and mode (one NVRTC run serves them all)."""
        return tuple(self.contract.expression(T=self.dtype.ctype, Q=self.out_dtype.ctype, MODE=_MODE_VALUES[m])
                     for m in DYNAMIC_MODES) + (self.amax_expression,)

    @property
    def group_shift(self) -> int:
        """log2 of the group size: the kernel's group_shift (per group; 0 otherwise)."""
        return max(self.group_size.bit_length() - 1, 0)


def plan_dynamic_quant(dtype, hidden: int, out_dtype, mode: str = "per_token",
                       group_size: int | None = None) -> DynamicQuantPlan:
    """The plan of dynamic_quant; ValueError for a dtype, output dtype or mode it does not take, a hidden size
    that is not a positive int, and per group (``group_size`` 64 or 128, default 128) a group that does not
    divide hidden or more than MAX_GROUPS groups; a group_size given to another mode is refused too."""
    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    if isinstance(hidden, bool) or type(hidden) is not int or hidden <= 0:
        raise ValueError(f"hidden must be a positive int, got {hidden!r}")
    if not isinstance(mode, str) or mode not in DYNAMIC_MODES:
        raise ValueError(f"mode must be one of {DYNAMIC_MODES}, got {mode!r}")
    group_size = group_size_for(mode, group_size, hidden, MAX_GROUPS)
    return DynamicQuantPlan(dt, hidden, qt, mode, group_size, block_for(dt, hidden))

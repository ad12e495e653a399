"""rms_norm_quant's launch plans: pure, no GPU (on the shared row plan, pyrms/ops/_row_plan.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from ...contract import Contract, contract
from .._row_plan import _RowPlan, block_and_cache
from .._rms_row_plan import SUM_PRECISIONS


# The kernels' MODE, by position: one given scale, one computed per row (per token), or one per group of
# `group` consecutive elements of a row (rms_norm_quant.cu's group kernels).
QUANT_MODES = ("static", "per_token", "per_group")


# Per group: the group sizes (vLLM's and DeepSeek's 1x64 and 1x128), and the most groups a row may have
# (rms_norm_quant.cu's GroupScales::MAX: their maxima are kept in static shared memory).
QUANT_GROUPS = (64, 128)


MAX_GROUPS = 1024


def group_size_for(mode: str, group_size, hidden: int, max_groups: int) -> int:
    """The group size of a quantizing mode: 0 unless 'per_group' (where a group_size given is refused by name),
    else group_size (default 128) of QUANT_GROUPS, dividing hidden into at most max_groups groups (the kernel's
    shared memory for their maxima); ValueError naming the bad value otherwise."""
    if mode != "per_group":
        if group_size is not None:
            raise ValueError(f"group_size applies to mode='per_group' only, got group_size={group_size!r} with "
                             f"{mode!r}")
        return 0
    group_size = 128 if group_size is None else group_size
    if type(group_size) is not int or group_size not in QUANT_GROUPS:
        raise ValueError(f"group_size must be one of {QUANT_GROUPS}, got {group_size!r}")
    if hidden % group_size or hidden // group_size > max_groups:
        raise ValueError(f"per_group needs hidden_size a multiple of group_size {group_size} and at most {max_groups} "
                         f"groups ({max_groups * group_size} elements), got hidden_size {hidden}")
    return group_size


@dataclass(frozen=True)
class RmsNormQuantPlan(_RowPlan):
    """For rms_norm_quant.cu: the plain RMSNorm row (its fold width, cache and launch shapes) with a quantizing
    output step; the weight is of the rows' dtype. round_input: quantize the plain forward's output rounded to
    the rows' dtype (vLLM's kernels) instead of the fp32 value. norm_out: also store the unquantized value
    rounded to the rows' dtype (the kernels' NORM_OUT; their own compile unit, so the others keep their code)."""

    out_dtype: dtypes.QuantDType = dtypes.FLOAT8_E4M3FN
    mode: str = "static"
    round_input: bool = False
    group_size: int = 0  # per_group: elements per group (QUANT_GROUPS); 0 for the other modes
    norm_out: bool = False

    kernel = "rms_norm_quant_kernel"
    group_kernel = "rms_norm_group_quant_kernel"  # per_group's entry point (the same row, MODE PER_GROUP)
    source = "rms_norm_quant.cu"

    FLAGS = ("round_input", "norm_out")

    @property
    def contract(self) -> Contract:
        return contract(self.source, self.group_kernel if self.mode == "per_group" else self.kernel)

    def _type_params(self) -> dict:
        """Q, the output's type, and MODE (the group kernels are MODE PER_GROUP by construction)."""
        if self.mode == "per_group":
            return {"Q": self.out_dtype.ctype}
        return {"Q": self.out_dtype.ctype, "MODE": QUANT_MODES.index(self.mode)}

    @property
    def group_shift(self) -> int:
        """log2 of the group size: the kernel's group_shift (per_group only)."""
        return self.group_size.bit_length() - 1


@dataclass(frozen=True)
class FusedAddRmsNormQuantPlan(RmsNormQuantPlan):
    """rms_norm_quant.cu's kernel after the fused residual add (added_row.cuh). sum_precision (SUM_PRECISIONS,
    as the unquantized fused add's plan): "fp32" normalizes the fp32 sum (the kernels' FP32_SUM; bf16 and fp16 only),
    "rounded" the rounded one."""

    sum_precision: str = "rounded"

    kernel = "fused_add_rms_norm_quant_kernel"
    group_kernel = "fused_add_rms_norm_group_quant_kernel"

    def _type_params(self) -> dict:
        """Q and MODE, and FP32_SUM: the semantics, a template flag of its own (a spelled-out option, not a FLAG)."""
        return {**super()._type_params(), "FP32_SUM": self.sum_precision == "fp32"}


def plan_rms_norm_quant(dtype, hidden: int, out_dtype, *, mode: str = "static", round_input: bool = False,
                        residual: bool = False, group: int | None = None, norm_out: bool = False,
                        sum_precision: str | None = None) -> RmsNormQuantPlan:
    """The plan of rms_norm_quant (residual=True: fused_add_rms_norm_quant; norm_out: with the unquantized
    output beside); ValueError for an unknown
    mode or output dtype, and per group (``group``: 64 or 128, default 128) for a group that does not divide
    hidden or more than MAX_GROUPS groups; a group given to another mode is refused too. sum_precision (the
    fused add only): SUM_PRECISIONS' "rounded" (None, the default) or "fp32"; float32 rows have one semantics,
    so both plan the same kernel there."""
    dt, qt = dtypes.get(dtype), dtypes.quantized(out_dtype)
    if sum_precision is not None and (not isinstance(sum_precision, str) or sum_precision not in SUM_PRECISIONS):
        raise ValueError(f"sum_precision must be one of {SUM_PRECISIONS} (or None), got {sum_precision!r}")
    if sum_precision is not None and not residual:
        raise ValueError(f"sum_precision applies to fused_add_rms_norm_quant only, got sum_precision={sum_precision!r}")
    if mode not in QUANT_MODES:
        raise ValueError(f"mode must be one of {QUANT_MODES}, got {mode!r}")
    group = group_size_for(mode, group, hidden, MAX_GROUPS)
    block, cache = block_and_cache(dt, hidden)
    if not residual:
        return RmsNormQuantPlan(dt, hidden, block, cache, qt, mode, bool(round_input), group, bool(norm_out))
    if sum_precision is None or dt is dtypes.FLOAT32:  # float32's sum is never rounded
        sum_precision = "rounded"
    return FusedAddRmsNormQuantPlan(dt, hidden, block, cache, qt, mode, bool(round_input), group, bool(norm_out),
                                    sum_precision)

"""layer_norm's launch plans: pure, no GPU (on the shared row plan, pyrms/ops/_row_plan.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes
from .._row_plan import _RowPlan, _WeightAndOutKinds, _type_params, block_and_cache, out_kind, weight_kind


class _Params:
    """The weight and bias of a LayerNorm row plan (its `weightless` and `fp32_params`): the forward's and the
    quantizing kernel's."""

    weightless: bool
    fp32_params: bool
    dtype: dtypes.DType

    @property
    def weight(self) -> str:
        """The weight's kind (WEIGHT_KINDS); the bias, if any, is of the same dtype (of the rows' without a weight)."""
        return "none" if self.weightless else "float32" if self.fp32_params else "same"

    @property
    def param_dtype(self) -> dtypes.DType:
        """The weight's and the bias's dtype."""
        return dtypes.FLOAT32 if self.fp32_params else self.dtype


@dataclass(frozen=True)
class LayerNormPlan(_Params, _WeightAndOutKinds, _RowPlan):
    bias: bool = True  # False: y = x_hat * w, no bias term
    rms: bool = False  # True: RMSNorm with a bias (RMSNorm's statistics, nothing subtracted): the kernel's RMS
    weightless: bool = False  # True: no weight (w = 1), the kernels' W = void
    fp32_params: bool = False  # True: weight and bias in fp32 beside bf16/fp16 rows (W = float)
    out: str = "same"  # OUT_KINDS

    kernel = "layer_norm_kernel"
    source = "layer_norm.cu"

    FLAGS = ("bias", "rms")

    @property
    def group(self) -> tuple[str, ...]:
        """Every kernel of layer_norm.cu for one dtype, weight and output kind: LayerNorm's with and without bias
        (the backward is a unit of its own: layer_norm_backward.cu), or RMSNorm's with a bias, a unit of its own
        (compiled only where one is used)."""
        if self.rms:
            return self._group((True, True))
        return self._group((True, False)) + self._group((False, False))


def plan_layer_norm(dtype, hidden: int, *, bias: bool = True, weight: bool = True, weight_dtype=None,
                    out_dtype=None, rms: bool = False) -> LayerNormPlan:
    """weight=False: no weight (torch.nn.LayerNorm(elementwise_affine=False) when bias is False too);
    weight_dtype: the weight's and the bias's dtype (None: the rows'; float32 beside bf16/fp16 rows);
    out_dtype: as plan_rms_norm's; rms: RMSNorm with a bias (x * inv * w + b, inv RMSNorm's), which needs the
    bias (without one it is RMSNorm with round_once)."""
    dt = dtypes.get(dtype)
    if rms and not bias:
        raise ValueError("rms=True is RMSNorm with a bias: pass the bias (without one, the RMSNorm forward with "
                         "round_once=True computes the same)")
    fp32 = weight and weight_dtype is not None and weight_kind(dt, weight_dtype) == "float32"
    return LayerNormPlan(dt, hidden, *block_and_cache(dt, hidden), bool(bias), bool(rms), not weight, fp32,
                         out_kind(dt, out_dtype))


@dataclass(frozen=True)
class LayerNormQuantPlan(_Params, _RowPlan):
    """layer_norm.cu's quantizing kernel: LayerNorm's row (its fold width, cache and launch shapes, so its
    statistics bit for bit) with one static scale's fp8/int8 store. round_input: quantize the forward's output
    rounded to the rows' dtype (FlashInfer's kernel) instead of the fp32 value."""

    bias: bool = True
    round_input: bool = False
    weightless: bool = False
    fp32_params: bool = False
    out_dtype: dtypes.QuantDType = dtypes.FLOAT8_E4M3FN

    kernel = "layer_norm_quant_kernel"
    source = "layer_norm.cu"

    FLAGS = ("bias", "round_input")

    def _type_params(self) -> dict:
        """Q, the output's type, and W, the weight's (the rows', float or void)."""
        return {"Q": self.out_dtype.ctype, "W": _type_params(self.dtype, self.weight, "same")["W"]}


def plan_layer_norm_quant(dtype, hidden: int, out_dtype=dtypes.FLOAT8_E4M3FN, *, bias: bool = True,
                          weight: bool = True, weight_dtype=None, round_input: bool = False) -> LayerNormQuantPlan:
    """The plan of layer_norm_quant: LayerNorm's (plan_layer_norm's weight and bias options) with an ``out_dtype``
    of dtypes.QUANTIZED output; ValueError for another output dtype or a weight dtype that is neither the rows' nor
    float32."""
    ln = plan_layer_norm(dtype, hidden, bias=bias, weight=weight, weight_dtype=weight_dtype)
    return LayerNormQuantPlan(ln.dtype, hidden, ln.block, ln.cache, ln.bias, bool(round_input), ln.weightless,
                              ln.fp32_params, dtypes.quantized(out_dtype))

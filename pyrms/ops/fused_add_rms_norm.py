"""``pyrms.fused_add_rms_norm``: residual add + RMSNorm in place (kernel: cuda_src/fused_add_rms_norm.cu)."""
from __future__ import annotations

from .. import driver, dtypes
from .. import plan as planner
from . import _operands as check
from . import _placement
from .._types import DTypeLike, Operand, OptionalOperand, StreamLike
from ._prepared import Pointers, PreparedCache, RowLaunches, scalars_ok, use_pdl

_SIGNATURE = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
# Up to this many rows the latency kernel launches (plan.FEW_ROWS; pyrms.testing.forced_row_variant).
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, strides, options) of fused_add_rms_norm, resolved once."""

    __slots__ = ("rows", "max_rows", "pointers", "weightless", "placed")

    def __init__(self, device, dtype, hidden, input_stride, residual_stride, gemma, round_once, pdl, weight_dtype=None,
                 sum_precision=None, residual_dtype=None):
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        r_stride = check.stride_arg("residual_stride", residual_stride, hidden)
        p = planner.plan_fused_add_rms_norm(dt, hidden, gemma=bool(gemma), round_once=bool(round_once),
                                            weight_dtype=weight_dtype, sum_precision=sum_precision,
                                            residual_dtype=residual_dtype)
        self.rows = RowLaunches(p, _SIGNATURE, (hidden, x_stride, r_stride), device, use_pdl(device, pdl),
                                (x_stride, r_stride))
        self.max_rows = check.max_rows(hidden, x_stride, r_stride)
        # input and residual are both written: disjoint from each other and the weight
        self.weightless = p.weight == "none"  # then the weight pointer is null and never read
        weight = [] if self.weightless else [(p.weight_itemsize, 0)]
        self.pointers = Pointers(hidden, [(dt.itemsize, x_stride), (p.residual_dtype.itemsize, r_stride), *weight],
                                 [(0, 1, False)] + ([] if self.weightless else [(0, 2, False), (1, 2, False)]))
        self.placed = _placement.for_device(device)  # None with one device: nothing to check per call

    def __call__(self, input, residual, weight, epsilon, num_tokens, stream) -> bool:
        pointers = (input, residual) if self.weightless else (input, residual, weight)
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and self.pointers.ok(pointers, num_tokens)):
            return False
        handle, placed = check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        self.rows(_FEW_ROWS, num_tokens, handle, input | residual | weight, input, residual, weight, epsilon)
        return True


_prepared = PreparedCache(Prepared)


def fused_add_rms_norm(input: Operand, residual: Operand, weight: OptionalOperand, epsilon: float,
                       num_tokens: int | None = None, hidden_size: int | None = None, *, dtype: DTypeLike | None = None,
                       input_stride: int | None = None, residual_stride: int | None = None, stream: StreamLike = None,
                       gemma: bool = False, round_once: bool = False, pdl: bool = True,
                       weight_dtype: DTypeLike | None = None, sum_precision: str | None = None,
                       residual_dtype: DTypeLike | None = None) -> None:
    """vLLM's fused_add_rms_norm, in place on ``num_tokens`` rows of ``hidden_size`` elements:
    ``residual <- input + residual`` (added in fp32, rounded once to the dtype), then
    ``input <- rms_norm(residual, weight)`` of that rounded sum, bit for bit what ``pyrms.rms_norm``
    would compute from the new residual (same ``gemma`` and ``round_once`` options).

    ``sum_precision``: what is normalized. ``"rounded"`` (the default), as above: vLLM's.
    ``"fp32"``: the fp32 sum ``s = input + residual``, never rounded before it is normalized, while the
    residual still stores it rounded to the dtype: FlashInfer's and SGLang's ``fused_add_rmsnorm``
    (which also round once: ``round_once=True``). A float32 ``residual_dtype`` (raw pointers; an array
    gives its own) beside bf16 or fp16 rows: an fp32 residual stream (QuACK's, Transformer Engine's),
    which stores ``s`` exactly; its sum precision is "fp32" (None picks it; "rounded" is an error).
    With float32 rows both precisions are the same computation. docs/numerics.md has the formulas.

    ``input``, ``residual``, ``weight``: raw device pointers (int) or arrays as in ``pyrms.rms_norm``
    ([..., hidden_size], weight [hidden_size]; sizes then inferred), any element alignment of each
    pointer. ``input`` and ``residual`` must be disjoint, each with its own row stride
    (``input_stride``/``residual_stride``, >= hidden_size; default: the array's, or hidden_size).
    ``dtype``, ``stream``, ``epsilon``, ``pdl``, ``weight=None`` (no weight) and an fp32 weight
    (``weight_dtype``): as in ``pyrms.rms_norm``.

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument. The launch is asynchronous on ``stream``.
    """
    if type(input) is int and type(residual) is int and (type(weight) is int or weight is None):
        if weight is None:  # no weight: its own kernel (W = void), a null pointer never read
            weight, weight_dtype = 0, check.no_weight(weight_dtype)
        static = (dtype, hidden_size, input_stride, residual_stride, gemma, round_once, pdl, weight_dtype,
                  sum_precision, residual_dtype)
        prepared = _prepared.get(*static)
        if prepared is not None and prepared(input, residual, weight, epsilon, num_tokens, stream):
            return
        _explain(input, residual, weight, epsilon, num_tokens, hidden_size, dtype, input_stride, residual_stride, stream,
                 pdl, gemma, weight_dtype, sum_precision, residual_dtype)
        launched = _prepared.require(*static)(input, residual, weight, float(epsilon), int(num_tokens), stream)
        assert launched, "the checks above accept what the prepared launch declines"
        return
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("input", input, input_stride, "input_stride", True),
                                                 ("residual", residual, residual_stride, "residual_stride", True)],
                                           vectors=[] if weight is None else [("weight", weight)],
                                           mixed=("weight", "residual"))
    if rows:
        (x, x_stride), (r, r_stride, r_dtype) = found["input"], found["residual"]
        w, weight_dtype = check.weight_operand(found.get("weight"), weight_dtype)
        if r_dtype is not None:  # an array's dtype is the residual's
            if residual_dtype is not None and dtypes.get(residual_dtype) is not r_dtype:
                raise ValueError(f"residual has dtype {r_dtype.name}, but residual_dtype is "
                                 f"{dtypes.get(residual_dtype).name}")
            residual_dtype = r_dtype
        fused_add_rms_norm(x, r, w, epsilon, rows, hidden, dtype=dt, input_stride=x_stride, residual_stride=r_stride,
                           stream=stream, gemma=gemma, round_once=round_once, pdl=pdl, weight_dtype=weight_dtype,
                           sum_precision=sum_precision, residual_dtype=residual_dtype)


def _explain(input, residual, weight, epsilon, num_tokens, hidden_size, dtype, input_stride, residual_stride, stream,
             pdl, gemma, weight_dtype, sum_precision, residual_dtype) -> None:
    """Raise the error naming what the prepared launch declined."""
    check.flag("pdl", pdl)
    num_tokens, hidden = check.sizes(num_tokens, hidden_size)
    check.epsilon(epsilon)
    dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
    p = planner.plan_fused_add_rms_norm(dt, 1, gemma=bool(gemma), weight_dtype=weight_dtype,  # checked
                                        sum_precision=sum_precision, residual_dtype=residual_dtype)
    rows = {"input": (input, input_stride, "input_stride")}
    residual_row = {"residual": (residual, residual_stride, "residual_stride")}
    if p.fp32_residual:  # rows of another dtype: a layout of their own
        _, _, r = check.layout(num_tokens, hidden, dtypes.FLOAT32, rows=residual_row, vectors={})
    else:
        rows, r = {**rows, **residual_row}, {}
    if p.weight == "float32":  # a [hidden] vector of its own dtype: layout's params
        _, _, found = check.layout(num_tokens, hidden, dtype, rows=rows, vectors={}, params={"weight": weight},
                                   params_dtype=dtypes.FLOAT32)
    else:
        _, _, found = check.layout(num_tokens, hidden, dtype, rows=rows,
                                   vectors={} if p.weight == "none" else {"weight": weight})
    r.update(found)
    check.disjoint([r["input"], r["residual"]], [r["weight"]] if "weight" in r else [])
    _placement.check(driver.selected_device(), {name: region.ptr for name, region in r.items()}, stream)

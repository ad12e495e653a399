"""``pyrms.rms_norm``: RMSNorm forward on device pointers or arrays (kernel: cuda_src/rms_norm.cu)."""
from __future__ import annotations

from typing import Any, overload

from ... import driver, dtypes
from .. import _row_plan as planner
from .. import _operands as check
from ..._types import Array, ArrayT, DTypeLike, Operand, OperandT, OptionalOperand, Rows, StreamLike, Strides
from ...tensor import Tensor
from .._convention import UNSET, Form
from .. import _convention
from .. import _explain, _placement, _views
from .._prepared import PreparedCache, RowLaunches, use_pdl
from .nd import ND_DECLARATION, NdLaunch, NdPrepared, is_nd, lead_sizes, lead_strides
from . import plan as rms_plan

_FORM = Form("rms_norm", ("input", "weight"), 2, 1e-6)
_DEFAULT_DTYPE = dtypes.BFLOAT16
# Up to this many rows the latency kernel launches (plan.FEW_ROWS); read at every call, so that
# tests.support.testing.forced_row_variant can force either kernel.
_FEW_ROWS = planner.FEW_ROWS


class Prepared:
    """One (device, dtype, hidden, strides, options) of rms_norm, resolved once: kernels, launch
    shapes, the packed trailing arguments and the row limit. A call checks only what changes between
    calls, inline, and returns False, having launched nothing, for anything unusual; the general path
    then says what is wrong."""

    __slots__ = ("rows", "packed", "mask", "o_mask", "max_rows", "x_row_bytes", "o_row_bytes", "x_step", "o_step",
                 "same_steps", "spans", "weightless", "w_mask", "w_bytes", "placed")

    def __init__(self, device, dtype, hidden, input_stride, out_stride, gemma, round_once, pdl, weight_dtype=None,
                 out_dtype=None):
        hidden = check.size("hidden_size", hidden)
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        p = rms_plan.plan_rms_norm(dt, hidden, gemma=bool(gemma), round_once=bool(round_once), weight_dtype=weight_dtype,
                                  out_dtype=out_dtype)
        # The weight: none (a null pointer, never read), or of p.weight_itemsize bytes per element.
        self.weightless = p.weight == "none"
        self.w_mask = max(p.weight_itemsize, 1) - 1
        self.w_bytes = hidden * p.weight_itemsize
        self.rows = RowLaunches(p, (hidden, x_stride, o_stride), device, use_pdl(device, pdl),
                                (x_stride, o_stride))
        # Many short rows: packed several to a warp (rms_norm_nd_kernel), not one 32-thread block each.
        self.packed = NdLaunch(p, (x_stride, 0, 0, o_stride, 0, 0), 0, device, use_pdl(device, pdl)) if p.lanes else None
        self.mask = dt.itemsize - 1  # itemsizes are powers of two: alignment is a bit test
        odt = p.out_dtype  # the rows' dtype, or float32 (then out's own mask and byte sizes)
        self.o_mask = odt.itemsize - 1
        self.max_rows = check.max_rows(hidden, x_stride, o_stride)
        self.x_row_bytes, self.o_row_bytes = hidden * dt.itemsize, hidden * odt.itemsize
        self.x_step, self.o_step = x_stride * dt.itemsize, o_stride * odt.itemsize
        self.same_steps = x_stride == o_stride and odt is dt  # in place needs one dtype
        self.spans = (1, self.o_row_bytes, self.x_row_bytes)  # (rows, out's bytes, input's bytes) of the last call
        self.placed = _placement.for_device(device)  # None with one device: nothing to check per call

    def __call__(self, out, input, weight, epsilon, num_tokens, stream, rstd=0) -> bool:
        """Launch, or return False having launched nothing; rstd: 0, or where each row's inv_rms goes
        (num_tokens float32, disjoint from every other operand)."""
        if not (type(num_tokens) is int and 0 < num_tokens <= self.max_rows and type(epsilon) is float
                and 0.0 <= epsilon <= check.FLOAT32_MAX):  # NaN fails the range
            return False
        # Null or misaligned pointers; a negative one fails to pack (struct range) before any launch.
        pointers_or = out | input | weight
        if (not (out and input and (not weight if self.weightless else weight)) or pointers_or & self.mask
                or weight & self.w_mask
                or out & self.o_mask):
            return False
        rows, o_bytes, x_bytes = self.spans  # a model repeats row counts: the spans of the last one are kept
        if rows != num_tokens:
            o_bytes = (num_tokens - 1) * self.o_step + self.o_row_bytes
            x_bytes = (num_tokens - 1) * self.x_step + self.x_row_bytes
            self.spans = (num_tokens, o_bytes, x_bytes)
        o_end = out + o_bytes
        if out < input + x_bytes and input < o_end and not (out == input and self.same_steps):
            return False
        if out < weight + self.w_bytes and weight < o_end:  # never for no weight (0 bytes)
            return False
        if rstd and not self._rstd_ok(rstd, num_tokens, (out, o_end), (input, input + x_bytes),
                                      (weight, weight + self.w_bytes)):
            return False
        if stream is None:
            stream = 0
        elif type(stream) is not int or not 0 <= stream < 18446744073709551616:
            stream = check.stream(stream)
        placed = self.placed
        if placed is not None and not placed.ok((out, input) if self.weightless else (out, input, weight), stream):
            return False
        launches = self.rows  # RowLaunches.__call__, inlined: a Python frame less on the hot path
        if num_tokens <= _FEW_ROWS:
            few = (launches.few_aligned if launches.aligned_layout and not pointers_or & launches.align_mask
                   else launches.few)
            launches.launch_few(few, num_tokens, stream, out, input, weight, rstd, epsilon)
        elif self.packed is not None and not rstd:  # packed rows store no rstd: the same tree one row per block
            self.packed(num_tokens, 1, 1, stream, out, input, weight, epsilon)
        else:
            launches.launch_many(launches.many, num_tokens, stream, out, input, weight, rstd, epsilon)
        return True

    @staticmethod
    def _rstd_ok(rstd, num_tokens, *spans) -> bool:
        """rstd's per-call checks: a float32 pointer whose num_tokens elements overlap no operand's span."""
        end = rstd + 4 * num_tokens
        return rstd > 0 and not rstd % 4 and not any(start < end and rstd < stop for start, stop in spans)


def _make(device, dtype, hidden, input_stride, out_stride, gemma, round_once, pdl, weight_dtype=None,
          weight_stride=None, out_dtype=None):
    """The prepared launch of one static argument set: N-D (tuple strides, a weight per outer row) or plain."""
    if is_nd(None, input_stride, out_stride, weight_stride):
        return NdPrepared(device, dtype, hidden, input_stride, out_stride, gemma, round_once, pdl, weight_dtype,
                          weight_stride, out_dtype)
    return Prepared(device, dtype, hidden, input_stride, out_stride, gemma, round_once, pdl, weight_dtype, out_dtype)


_prepared = PreparedCache(_make)
_last = _prepared.last  # the last call on raw pointers, bound when it repeats


def prepared(dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl=True,
             weight_dtype=None, weight_stride=None, out_dtype=None) -> Prepared | NdPrepared | None:
    """The prepared launch for these static arguments on the calling thread's device, or None where
    they are invalid: for adapters (pyrms.torch) that hold raw pointers and would otherwise pay for
    rms_norm's keyword arguments on every call. Call it as ``p(out, input, weight, epsilon, rows,
    stream)`` (weight 0 with ``weight_dtype="none"``; rows a tuple of leading sizes where the strides
    are tuples); a False return launched nothing, and ``rms_norm`` with the same arguments names why."""
    return _prepared.get(dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl, weight_dtype,
                         weight_stride, out_dtype)


def launch_prepared(static: tuple, args: tuple) -> bool:
    """``prepared(*static)(*args)`` for adapters that hold raw pointers (pyrms.torch), through rms_norm's last
    call (bound when it repeats, _prepared.LastCall): True where it launched, False where the arguments are
    invalid (``rms_norm`` with the same arguments names why). ``args`` are (out, input, weight, epsilon, rows,
    stream[, rstd]) of exactly the types the prepared launch checks for (ints, a float epsilon, an int stream handle):
    the memo compares values, so that a bool or an int epsilon would reach no check."""
    device = driver._selected.device  # type: ignore[attr-defined]
    key = (args, static, device, _FEW_ROWS)
    last = _last.pair
    if last[0] == key and last[1] is not None:  # the bound repeat inline: a frame less on the decode path
        last[1]()
        return True
    try:
        prepared = device.prepared[(_prepared, *static)]  # type: ignore[union-attr]
    except (KeyError, TypeError, AttributeError):
        prepared = _prepared.get(*static)
    return _last.launch(key, prepared, args)


@overload
def rms_norm(input: Array, weight: Array | None, eps: float = ..., *, out: None = None, dtype: DTypeLike | None = None,
             stream: StreamLike = None, gemma: bool = False, round_once: bool = False, pdl: bool = True,
             out_dtype: DTypeLike | None = None, rstd: Operand | None = None) -> Tensor: ...
@overload
def rms_norm(input: Array, weight: Array | None, eps: float = ..., *, out: ArrayT, dtype: DTypeLike | None = None,
             stream: StreamLike = None, gemma: bool = False, round_once: bool = False, pdl: bool = True,
             out_dtype: DTypeLike | None = None, rstd: Operand | None = None) -> ArrayT: ...
@overload
def rms_norm(out: None, input: Array, weight: Operand | None, /, epsilon: float, num_tokens: Rows | None = None,
             hidden_size: int | None = None, *, dtype: DTypeLike | None = None, input_stride: Strides | None = None,
             out_stride: Strides | None = None, stream: StreamLike = None, gemma: bool = False,
             round_once: bool = False, pdl: bool = True, weight_dtype: DTypeLike | None = None,
             weight_stride: int | None = None, out_dtype: DTypeLike | None = None,
             rstd: Operand | None = None) -> Tensor: ...
@overload
def rms_norm(out: OperandT, input: Operand, weight: Operand | None, /, epsilon: float, num_tokens: Rows | None = None,
             hidden_size: int | None = None, *, dtype: DTypeLike | None = None, input_stride: Strides | None = None,
             out_stride: Strides | None = None, stream: StreamLike = None, gemma: bool = False,
             round_once: bool = False, pdl: bool = True, weight_dtype: DTypeLike | None = None,
             weight_stride: int | None = None, out_dtype: DTypeLike | None = None,
             rstd: Operand | None = None) -> OperandT: ...
def rms_norm(input: Any, weight: Any = UNSET, eps: Any = UNSET, epsilon: Any = UNSET, num_tokens: Any = None,
             hidden_size: Any = None, *, out: Any = UNSET, dtype: Any = None, input_stride: Any = None,
             out_stride: Any = None, stream: Any = None, gemma: Any = False, round_once: Any = False, pdl: Any = True,
             weight_dtype: Any = None, weight_stride: Any = None, out_dtype: Any = None, rstd: Any = None) -> Any:
    """RMSNorm of each row of ``input`` (``num_tokens`` rows of ``hidden_size`` elements), written to
    ``out``; returns ``out`` (a new pyrms.Tensor when ``out`` is None). Two calling conventions:

    - input first, on arrays, as FlashInfer, QuACK and ``torch.nn.functional`` call it:
      ``y = rms_norm(x, weight)``, ``rms_norm(x, weight, 1e-5)``, ``rms_norm(x, weight, eps=1e-5, out=y)``
      (``eps`` defaults to 1e-6, as in ``pyrms.torch.rms_norm``; the keyword options below apply too);
    - out first, vLLM's order, on raw device pointers or arrays:
      ``rms_norm(out, input, weight, epsilon, num_tokens, hidden_size)``, positionally or every operand by name
      (``out=``, ``input=``, ``weight=``, ``epsilon=``); ``epsilon`` is required.

    A call that gives ``epsilon`` is out first, any other input first. A call of neither (raw pointers input
    first, ``eps`` beside ``epsilon``, an operand missing) raises TypeError showing both calls.

    ``out[r] = x[r] / sqrt(mean(x[r]^2) + epsilon) * weight``, accumulated in fp32. By default the
    normalized value is rounded to the storage dtype before the weight multiplies it (the seed's and
    Hugging Face LLaMA's rounding); ``round_once=True`` rounds only the final product (PyTorch's
    fused kernel, current vLLM). ``gemma=True`` multiplies by ``1 + weight`` (the addition in fp32).
    ``weight=None``: no weight, ``out[r] = round(x[r] * inv_rms[r])`` (vLLM's ``weight=None``, Liger's
    ``elementwise_affine=False``). The weight may be float32 beside bfloat16 or float16 rows (its fp32
    value multiplies exactly as the dtype's would): a float32 array, or ``weight_dtype='float32'`` for a
    raw pointer (``weight_dtype`` defaults to the array's dtype, else the rows' dtype).
    ``out`` may be float32 beside bfloat16 or float16 rows (Hugging Face's result for an fp32 weight):
    a float32 array, or ``out_dtype='float32'`` for a raw pointer or the allocating form; it holds the
    final fp32 product unrounded, so rounding it to the rows' dtype gives their output bit for bit (the
    default rounding still rounds ``x * inv_rms`` to the rows' dtype first; docs/numerics.md). Not in place.

    ``out``, ``input``, ``weight``: raw device pointers (int), pyrms Tensors, torch tensors, or objects
    exposing ``__cuda_array_interface__`` or ``__dlpack__``. Arrays are [..., hidden_size], contiguous
    along the hidden dimension, with any strides along the leading dimensions (QK-norm's slices of a
    fused QKV tensor, transposed views), as long as they collapse to at most three and out's rows do
    not overlap; ``num_tokens`` and ``hidden_size`` then default to theirs (they are required for raw
    pointers). Any element alignment of any pointer is allowed; ``out`` may be ``input`` (in place).
    The weight is [hidden_size], or [L, hidden_size] with L the rows' first dimension: a weight per
    outer row (vLLM's batched weight; bitwise equal to L separate calls).

    Raw pointers in N-D form: ``num_tokens`` a tuple of 1 to 3 leading sizes (outermost first), and
    ``input_stride``/``out_stride`` tuples of as many element strides (default: contiguous);
    ``weight_stride``: elements between the rows of a [num_tokens[0], hidden_size] weight, one per
    outermost index (None or 0: one weight for every row).
    ``dtype``: a name ('bfloat16', 'bf16', 'float16', 'float32', ...), a numpy or torch dtype; by
    default the arrays' dtype, or bfloat16 for raw pointers. ``input_stride``/``out_stride``: elements
    between rows (>= hidden_size; default: the array's, or hidden_size). ``stream``: a pyrms Stream, a
    raw CUstream handle, a torch.cuda.Stream, any object with ``__cuda_stream__``, or None (the legacy
    default stream). With epsilon = 0 an all-zero row gives 0/0 = NaN, as in PyTorch.
    ``pdl`` (default True): programmatic dependent launch on GPUs that have it (sm_90 and later; older
    ones launch as usual): the kernel may start while the previous kernel on the stream finishes, and
    waits for it to complete before touching memory, so results and stream order are the same; it hides
    most of the launch latency of back-to-back kernels (docs/perf_notes.md). False launches plainly.

    ``rstd``: where each row's ``inv_rms`` (``1 / sqrt(mean(x^2) + epsilon)``, float32) is stored, for
    the backward (its ``rstd=``) to read instead of recomputing it (the same value: the same bits, and one
    reduction less per row there): a raw pointer to ``num_tokens`` float32 or a float32 array of shape
    (num_tokens,) or (num_tokens, 1), disjoint from every other operand. For rows one stride apart (not
    with ``weight_stride`` or N-D leading sizes); short rows then run one per block instead of packed
    (the same tree, the same bits).

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument. The launch is asynchronous on ``stream``.
    """
    # The overloads above are its types. Out first on raw pointers is the hot path: positionally, input, weight and
    # eps hold out, input and the weight (_convention says why); every other call is resolved first.
    if rstd is None and type(input) is int and type(weight) is int and (type(eps) is int or eps is None) and (
            out is UNSET):
        # The last call, bound when it repeats (_prepared.LastCall), first: its key is the arguments as given, and
        # what else the checks read (the thread's device: driver._selected is private to pyrms, read through the
        # package on purpose; the few-row threshold). Static arguments compare as the prepared launches' keys do.
        device = driver._selected.device  # type: ignore[attr-defined]
        key = (input, weight, eps, epsilon, num_tokens, hidden_size, stream, dtype, input_stride, out_stride, gemma,
               round_once, pdl, weight_dtype, weight_stride, out_dtype, device, _FEW_ROWS)
        last = _last.pair
        repeated = last[0] == key and type(epsilon) is float and type(num_tokens) is int and (
            stream is None or type(stream) is int)  # values the per-call checks take of their own types only
        if repeated and last[1] is not None:
            last[1]()
            return input
        if not repeated:
            _last.pair = (key, None)
        if eps is None:  # no weight: its own kernel (W = void), a null pointer never read
            eps, weight_dtype = 0, check.no_weight(weight_dtype)
        nd = (type(num_tokens) is tuple or type(input_stride) is tuple or type(out_stride) is tuple
              or not (weight_stride is None or weight_stride == 0))  # is_nd, inlined: a frame less
        if nd and not (type(input_stride) is tuple and type(out_stride) is tuple):
            input_stride, out_stride = _nd_strides(num_tokens, hidden_size, input_stride, out_stride)
        # The prepared launch's lookup, inlined (PreparedCache.get does the same; no device selected: None, and
        # the AttributeError caught).
        try:
            prepared = device.prepared[  # type: ignore[union-attr]
                (_prepared, dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl, weight_dtype,
                 weight_stride, out_dtype)]
        except (KeyError, TypeError, AttributeError):
            prepared = _prepared.get(dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl, weight_dtype,
                                     weight_stride, out_dtype)
        if prepared is not None and prepared(input, weight, eps, epsilon, num_tokens, stream):
            if repeated and not nd:  # the same call twice in a row: bound for the next ones
                _last.bind(key, prepared, input, weight, eps, epsilon, num_tokens, stream)
            return input
        if epsilon is UNSET:  # raw pointers input first (the prepared launch declines a missing epsilon): explained
            _convention.resolve(_FORM, (input, weight), eps, epsilon, out)
        out, input, weight = input, weight, eps
        _explain.explain(ND_DECLARATION if nd else _DECLARATION, dict(
            out=out, input=input, weight=weight, rstd=None, epsilon=epsilon, num_tokens=num_tokens,
            hidden_size=hidden_size, dtype=dtype, input_stride=input_stride, out_stride=out_stride,
            weight_stride=weight_stride, stream=stream, pdl=pdl, gemma=gemma, weight_dtype=weight_dtype,
            out_dtype=out_dtype))
        launched = _prepared.require(dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl, weight_dtype,
                                     weight_stride, out_dtype)(out, input, weight, float(epsilon), num_tokens, stream)
        assert launched, "the checks above accept what the prepared launch declines"
        return out
    out, input, weight, epsilon = _convention.resolve(_FORM, (input, weight), eps, epsilon, out)
    if type(out) is int and type(input) is int and (type(weight) is int or weight is None):  # out first by name
        if rstd is not None:  # the forward's statistics saved for the backward: rows one stride apart only
            return _with_rstd(out, input, weight, epsilon, num_tokens, hidden_size, rstd, dtype=dtype,
                              input_stride=input_stride, out_stride=out_stride, stream=stream, gemma=gemma,
                              round_once=round_once, pdl=pdl, weight_dtype=weight_dtype, weight_stride=weight_stride,
                              out_dtype=out_dtype)
        return rms_norm(out, input, weight, epsilon, num_tokens, hidden_size, dtype=dtype, input_stride=input_stride,
                        out_stride=out_stride, stream=stream, gemma=gemma, round_once=round_once, pdl=pdl,
                        weight_dtype=weight_dtype, weight_stride=weight_stride, out_dtype=out_dtype)
    dt, rows, hidden, found = check.arrays(dtype, num_tokens, hidden_size,
                                           rows=[("input", input, input_stride, "input_stride", False),
                                                 ("out", out, out_stride, "out_stride", True)],
                                           vectors=[] if weight is None else [("weight", weight)], mixed=("weight",),
                                           nd=True, mixed_out="out")
    if out is None:
        odt = dt if out_dtype is None else dtypes.get(out_dtype)
        out = check.allocate_like(input, odt, max(_views.rows(rows) if type(rows) is tuple else rows, 1), hidden)
        if type(rows) is tuple:  # a new contiguous output of the input's shape: its strides, collapsed as the input's
            found["out"] = (out.ptr, _views.contiguous(rows, hidden), odt)
        else:
            found["out"] = (out.ptr, hidden, odt)
    if rstd is not None and type(rstd) is not int and type(rows) is int:  # an array: its pointer, checked
        rstd = check.float32_per_row("rstd", rstd, rows, "rstd's values", written=True)
    if rows == 0:  # an empty batch of arrays: nothing to do
        return out
    (x, x_stride), (o, o_stride, o_dtype) = found["input"], found["out"]
    out_dtype = check.out_dtype_operand(o_dtype, out_dtype)
    w_entry = found.get("weight")
    w_stride = w_entry[3] if w_entry is not None and len(w_entry) == 4 else None
    w, weight_dtype = check.weight_operand(w_entry[:3] if w_entry is not None else None, weight_dtype)
    rms_norm(o, x, w, epsilon, rows, hidden, dtype=dt, input_stride=x_stride, out_stride=o_stride, stream=stream,
             gemma=gemma, round_once=round_once, pdl=pdl, weight_dtype=weight_dtype, weight_stride=w_stride or None,
             out_dtype=out_dtype, rstd=rstd)
    return out


def _with_rstd(out, input, weight, epsilon, num_tokens, hidden_size, rstd, *, dtype, input_stride, out_stride, stream,
               gemma, round_once, pdl, weight_dtype, weight_stride, out_dtype) -> OptionalOperand:
    """rms_norm on raw pointers (rms_norm reads arrays first) storing each row's inv_rms in rstd: rstd checked
    (float32, one per row, disjoint from the rest), then the plain rows' prepared launch."""
    if weight_stride is not None or type(num_tokens) is tuple or type(input_stride) is tuple:
        raise ValueError("rstd= is offered for rows one stride apart (num_tokens and int strides), not with "
                         "weight_stride or N-D leading sizes and strides")
    if weight is None:
        weight, weight_dtype = 0, check.no_weight(weight_dtype)
    if type(rstd) is not int:
        rstd = check.float32_per_row("rstd", rstd, check.sizes(num_tokens, hidden_size)[0], "rstd's values",
                                     written=True)
    prepared = _prepared.get(dtype, hidden_size, input_stride, out_stride, gemma, round_once, pdl, weight_dtype, None,
                             out_dtype)
    if prepared is not None and prepared(out, input, weight, epsilon, num_tokens, stream, rstd):
        return out
    _explain.explain(_DECLARATION, dict(
        out=out, input=input, weight=weight, rstd=rstd, epsilon=epsilon, num_tokens=num_tokens, hidden_size=hidden_size,
        dtype=dtype, input_stride=input_stride, out_stride=out_stride, stream=stream, pdl=pdl, gemma=gemma,
        weight_dtype=weight_dtype, out_dtype=out_dtype))
    raise AssertionError("unreachable: rms_norm's rstd passed every check the prepared launch makes")


def _nd_strides(num_tokens, hidden_size, input_stride, out_stride) -> tuple:
    """The N-D form's stride tuples: as given, or contiguous for num_tokens's leading sizes (None), or
    one int for one leading dimension; invalid arguments are passed on for the prepared launch's checks."""
    try:
        sizes = lead_sizes(num_tokens)
        hidden = check.size("hidden_size", hidden_size)
        return (lead_strides("input_stride", input_stride, sizes, hidden),
                lead_strides("out_stride", out_stride, sizes, hidden))
    except (TypeError, ValueError):
        return input_stride, out_stride


def _facts(call: dict, num_tokens: int, hidden: int) -> rms_plan.RmsNormPlan:
    """rms_norm's own checks for the shared explain path: its plan's (the weight's and the output's kinds)."""
    dt = _DEFAULT_DTYPE if call["dtype"] is None else dtypes.get(call["dtype"])
    p = rms_plan.plan_rms_norm(dt, 1, gemma=bool(call["gemma"]), weight_dtype=call["weight_dtype"],
                               out_dtype=call["out_dtype"])
    if p.weight == "none":
        check.weightless_pointer(call["weight"])
    return p


# rstd (where the call stores each row's inv_rms), out (in place over input allowed, of one dtype), input and the
# weight (none for weight_dtype='none'): what is written disjoint from the rest.
_DECLARATION = _explain.Declaration(
    operands=(_explain.statistic("rstd", written=True),
              _explain.Memory("out", _explain.Fact("out_dtype"), stride="out_stride", written=True),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("weight", _explain.Fact("weight_dtype"))),
    facts=_facts, in_place=(("out", "input"),), strides=("input_stride", "out_stride"))

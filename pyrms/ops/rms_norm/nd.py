"""rms_norm on N-D views and with a weight per outer row, and the packed launch of many short rows
(kernel: rms_norm.cu's rms_norm_nd_kernel; layouts: _views).

``pyrms.rms_norm`` comes here when its rows are not one stride apart (``num_tokens`` a tuple of
leading sizes, ``input_stride``/``out_stride`` tuples, or arrays whose leading dimensions do not
collapse), when ``weight_stride`` gives a weight per outer row, and, for plain layouts, to launch
many short rows packed several to a warp (rms_plan.RmsNormPlan.lanes). Same tree, same bits.
"""
from __future__ import annotations

import functools
import numbers
from types import SimpleNamespace

from ... import dtypes, launch
from .. import _operands as check
from .. import _explain, _placement, _views
from . import plan as rms_plan

_MAX_ELEMS = check.INT64_MAX // 16  # byte offsets of every dtype fit in 64 bits (check.extent)


class NdLaunch:
    """rms_norm_nd_kernel for one plan and fixed trailing arguments (hidden, strides, weight stride):
    a call gives the leading ones and the rows, and gets ceil(rows / rows per block) blocks. Packed rows
    whose strides (and weight stride) keep every row 16-byte aligned get the ALIGNED kernel too, for
    calls whose pointers are 16-byte aligned (32 with an fp32 output beside 2-byte rows: plan.align_mask)."""

    __slots__ = ("kernel", "aligned", "launch", "per_block", "align_mask")

    def __init__(self, p: rms_plan.RmsNormPlan, strides: tuple[int, ...], w_stride: int, device, pdl: bool):
        signature = p.nd_contract.signature
        self.kernel = launch.get_kernel(p.source, p.nd_expression, p.nd_group, signature, device)
        self.aligned = None
        if p.nd_aligned_expression and p.aligned_layout(*strides) and w_stride * p.weight_itemsize % 16 == 0:
            self.aligned = launch.get_kernel(p.source, p.nd_aligned_expression, p.nd_group, signature, device)
        self.launch = launch.RowLaunch(signature, p.nd_block, (p.hidden, *strides, w_stride), device, pdl=pdl)
        self.per_block = p.nd_rows_per_block
        self.align_mask = p.align_mask

    def __call__(self, rows: int, d1: int, d2: int, stream: int, out: int, input: int, weight: int,
                 epsilon: float) -> None:
        kernel = self.aligned if self.aligned is not None and not (out | input | weight) & self.align_mask else self.kernel
        self.launch(kernel, -(-rows // self.per_block), stream, out, input, weight, epsilon, rows, d1, d2)


def lead_strides(name: str, value, sizes: tuple[int, ...], hidden: int) -> tuple[int, ...]:
    """A stride argument of the N-D form: None (contiguous), or one int per leading dimension (>= 0)."""
    if value is None:
        return _views.contiguous(sizes, hidden)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, tuple) or len(value) != len(sizes):
        raise ValueError(f"{name} must be a tuple of {len(sizes)} strides (elements), one per leading dimension "
                         f"of num_tokens={sizes}, got {value!r}")
    return tuple(check.size(f"{name}[{i}]", s, check.INT64_MAX) if s != 0 else 0 for i, s in enumerate(value))


def lead_sizes(value) -> tuple[int, ...]:
    """num_tokens of the N-D form: an int, or a tuple of 1 to 3 leading sizes (outermost first)."""
    if isinstance(value, tuple):
        if not 1 <= len(value) <= _views.MAX_LEAD:
            raise ValueError(f"num_tokens must have 1 to {_views.MAX_LEAD} leading sizes, got {value!r}")
        sizes = tuple(check.size(f"num_tokens[{i}]", n) for i, n in enumerate(value))
    else:
        sizes = (check.size("num_tokens", value),)
    check.size("rows (the product of num_tokens)", _views.rows(sizes))
    return sizes


class NdPrepared:
    """rms_norm's prepared launch for one (device, dtype, hidden, N-D strides, weight stride, options):
    as ops.rms_norm.Prepared, a call checks what changes between calls and returns False, having
    launched nothing, for anything unusual (the explain path, ND_DECLARATION's, then names it)."""

    __slots__ = ("nd", "ndim", "x_strides", "o_strides", "w_stride", "weightless", "mask", "o_mask", "w_mask",
                 "w_itemsize", "itemsize", "o_itemsize", "hidden", "last", "placed")

    def __init__(self, device, dtype, hidden, input_strides, out_strides, gemma, round_once, pdl, weight_dtype,
                 weight_stride, out_dtype=None):
        from .._prepared import use_pdl

        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        ndim = len(out_strides)  # rms_norm passes tuples, one stride per leading dimension
        sizes = (1,) * ndim  # stride checks only: the sizes come with each call
        self.x_strides = lead_strides("input_stride", input_strides, sizes, hidden)
        self.o_strides = lead_strides("out_stride", out_strides, sizes, hidden)
        self.ndim, self.hidden, self.itemsize = ndim, hidden, dt.itemsize
        p = rms_plan.plan_rms_norm(dt, hidden, gemma=bool(gemma), round_once=bool(round_once), weight_dtype=weight_dtype,
                                  out_dtype=out_dtype)
        self.o_itemsize = p.out_dtype.itemsize  # the rows' itemsize, or 4 for an fp32 output
        self.o_mask = self.o_itemsize - 1
        self.weightless = p.weight == "none"
        self.w_stride = weight_stride_arg(weight_stride, hidden, self.weightless)
        self.w_itemsize = p.weight_itemsize  # 0: no weight, nothing read
        self.w_mask = max(p.weight_itemsize, 1) - 1
        self.mask = dt.itemsize - 1
        x3, o3 = (_views.kernel_dims(sizes, s)[2] for s in (self.x_strides, self.o_strides))
        self.nd = NdLaunch(p, (*x3, *o3), self.w_stride, device, use_pdl(device, pdl))
        self.last = None  # (sizes, rows, d1, d2, out's bytes, input's bytes, weight's bytes) of the last call
        self.placed = _placement.for_device(device)

    def _shape(self, num_tokens):
        """The per-call facts of a row shape, or None where it is invalid (the explain path says why)."""
        sizes = num_tokens if type(num_tokens) is tuple else (num_tokens,)
        if len(sizes) != self.ndim or not all(type(n) is int and n > 0 for n in sizes):
            return None
        rows = _views.rows(sizes)
        if rows > check.INT32_MAX or _views.rows_overlap(sizes, self.o_strides, self.hidden):
            return None
        x_elems, o_elems, w_elems = spans(sizes, self.x_strides, self.o_strides, self.w_stride, self.hidden)
        if max(x_elems, o_elems, w_elems) > _MAX_ELEMS:
            return None
        d1, d2, _ = _views.kernel_dims(sizes, self.o_strides)
        return sizes, rows, d1, d2, o_elems * self.o_itemsize, x_elems * self.itemsize, w_elems * self.w_itemsize

    def __call__(self, out, input, weight, epsilon, num_tokens, stream) -> bool:
        if not (type(epsilon) is float and 0.0 <= epsilon <= check.FLOAT32_MAX):
            return False
        last = self.last
        if last is None or last[0] != num_tokens:
            last = self._shape(num_tokens)
            if last is None:
                return False
            self.last = (num_tokens, *last[1:])
        _, rows, d1, d2, o_bytes, x_bytes, w_bytes = last
        if (not (out and input and (not weight if self.weightless else weight)) or (out | input) & self.mask
                or weight & self.w_mask
                or out & self.o_mask):
            return False
        same = out == input and self.x_strides == self.o_strides and self.o_itemsize == self.itemsize
        if out < input + x_bytes and input < out + o_bytes and not same:
            return False
        if out < weight + w_bytes and weight < out + o_bytes:  # never for no weight (0 bytes)
            return False
        stream = check.stream(stream)
        placed = self.placed
        if placed is not None and not placed.ok((out, input) if self.weightless else (out, input, weight), stream):
            return False
        self.nd(rows, d1, d2, stream, out, input, weight, epsilon)
        return True


def _facts(call: dict, rows: int, hidden: int) -> SimpleNamespace:
    """The N-D form's own checks for the shared explain path (its plan's, its strides', its rows' overlap and
    extents), and per call the operands' dtypes and spans, and whether out may be input (the same strides)."""
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    p = rms_plan.plan_rms_norm(dt, hidden, gemma=bool(call["gemma"]), weight_dtype=call["weight_dtype"],
                               out_dtype=call["out_dtype"])
    sizes = lead_sizes(call["num_tokens"])
    x_strides = lead_strides("input_stride", call["input_stride"], sizes, hidden)
    o_strides = lead_strides("out_stride", call["out_stride"], sizes, hidden)
    if p.weight == "none":
        check.weightless_pointer(call["weight"])
    w_stride = weight_stride_arg(call["weight_stride"], hidden, p.weight == "none")
    if _views.rows_overlap(sizes, o_strides, hidden):
        raise ValueError(f"out_stride={o_strides} with num_tokens={sizes} and hidden_size={hidden} makes rows "
                         f"of out overlap; each output element must be written once")
    x_elems, o_elems, w_elems = spans(sizes, x_strides, o_strides, w_stride, hidden)
    for name, elems, strides in (("input", x_elems, x_strides), ("out", o_elems, o_strides)):
        if elems > _MAX_ELEMS:
            raise ValueError(f"{name} spans more than 2^59 elements (num_tokens={sizes}, strides {strides})")
    if w_elems > _MAX_ELEMS:
        raise ValueError(f"weight spans more than 2^59 elements ({sizes[0]} rows of stride {w_stride})")
    return SimpleNamespace(dtype=dt, out_dtype=p.out_dtype, weight_dtype=p.weight_dtype, out_span=(0, o_elems),
                           input_span=(0, x_elems), weight_span=(0, w_elems),
                           in_place=call["out"] == call["input"] and x_strides == o_strides)


# What NdPrepared checks per call, for the shared explain path: out, input and the weight over the elements their
# N-D layouts span (one row of that many, for the overlap checks); out may be input with the same strides.
ND_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("out", _explain.Fact("out_dtype"), span=_explain.Fact("out_span"), written=True),
              _explain.Memory("input", span=_explain.Fact("input_span")),
              _explain.Memory("weight", _explain.Fact("weight_dtype"), span=_explain.Fact("weight_span"))),
    facts=_facts, in_place=(("out", "input"),), in_place_when=_explain.Fact("in_place"),
    sizes=functools.partial(check.sizes, rows=lambda num_tokens: _views.rows(lead_sizes(num_tokens))))


def spans(sizes: tuple[int, ...], x_strides: tuple[int, ...], o_strides: tuple[int, ...], w_stride: int,
          hidden: int) -> tuple[int, int, int]:
    """Elements that input, out and the weight span from their pointers (a weight per outer row: sizes[0]
    rows of ``w_stride``): what NdPrepared bounds and checks for overlap, and the explain path too."""
    return (_views.extent(sizes, x_strides, hidden), _views.extent(sizes, o_strides, hidden),
            (sizes[0] - 1) * w_stride + hidden)


def weight_stride_arg(value, hidden: int, weightless: bool) -> int:
    """weight_stride: None or 0 (one weight for every row), else >= hidden: elements between the rows of
    a [num_tokens[0], hidden] weight, one per outermost index (so none for a call without a weight)."""
    if value is None or value == 0:
        return 0
    value = check.size("weight_stride", value, check.INT64_MAX)
    if value < hidden:
        raise ValueError(f"weight_stride must be 0 (one weight) or >= hidden_size ({hidden}), got {value}")
    if weightless:
        raise ValueError("weight_stride was given for weight=None; leave it out")
    return value


def is_nd(num_tokens, input_stride, out_stride, weight_stride) -> bool:
    """Whether a raw-pointer call takes the N-D form (a weight_stride of None or 0 is one weight)."""
    return (type(num_tokens) is tuple or type(input_stride) is tuple or type(out_stride) is tuple
            or not (weight_stride is None or weight_stride == 0))

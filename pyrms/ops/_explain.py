"""The one error path of the ops' raw-pointer calls, driven by each op's declaration.

A prepared launch checks a call inline and declines, launching nothing, whatever it cannot take; it knows
only that it declined. ``explain`` then walks the op's ``Declaration`` (its memory operands with their
elements and layouts, the pairs that may be in place, its scalar checks) and raises the error that names
the bad argument, or returns where the call is valid, and the op launches it through its prepared launch's
``require``. The walk runs only after a decline: nothing here is on the hot path.

What only one op knows (its plan's option checks, a scale's value, its N-D strides) is the declaration's
``facts`` hook, run after the shared scalar checks; what it returns (usually the op's plan) gives each
``Fact`` of the declaration for the call: an operand's dtype, its span, whether it is there at all.

The walk, in order: the on/off flags, the stride argument of an optional row operand not given, num_tokens and hidden_size, epsilon, the facts hook; then each
operand's kind (an int pointer), the row operands' stride arguments, each operand non-null and aligned to
its element, each spanning fewer than 2^59 elements (rows in their strides' order), the in-place pairs' dtypes, the overlaps (what is written against
everything after it in the declaration), the stream, and last the device of each pointer and of the
stream (a missing driver is reported after bad arguments).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .. import driver, dtypes
from . import _operands as check
from . import _placement

PER_ROW = (1, 1)  # a span of one element per row (a saved statistic, per-token scales)
ONE = (0, 1)  # a span of one element (a scale the kernel reads)


@dataclass(frozen=True)
class Fact:
    """A declaration's field that depends on the call: the attribute ``name`` of what the op's facts hook
    returned for it."""

    name: str


@dataclass(frozen=True)
class Memory:
    """One memory operand of an op's raw-pointer call.

    ``name``: the argument, as messages name it; the call's value is under ``key`` where given (two roles of
    one argument), else under ``name``; a Fact key: the facts' (an operand the hook read from an array). ``element``: its dtype, or a Fact giving it (None: the call has no
    such operand, as a weight of weight_dtype='none'). ``stride``: for [num_tokens, hidden] rows, the name of
    the stride argument that lays them out; ``span``: for the others, (row stride, elements per row) in
    elements (PER_ROW, ONE) or a Fact giving it, None for a [hidden] vector. ``written``: the launch writes it,
    so nothing else may overlap it. ``optional``: absent where the call gives None (then its stride argument
    must not be given). ``kind``: what a value
    that is not an int must be, for its TypeError; ``refusal``: where one ValueError says what every bad value
    (not an int, null, misaligned) should have been, that sentence."""

    name: str
    element: dtypes.DType | Fact = Fact("dtype")
    stride: str | None = None
    span: tuple[int, int] | Fact | None = None
    written: bool = False
    optional: bool = False
    kind: str | Fact = "a device pointer (int)"
    refusal: str | None = None
    key: str | Fact | None = None


@dataclass(frozen=True)
class Declaration:
    """What an op's raw-pointer call takes, for ``explain``.

    ``operands``: its memory, in the order overlaps are named ("out and input overlap": out first).
    ``facts(call, num_tokens, hidden)``: the op's own checks, after flags, sizes and epsilon; returns what the
    Facts are read from (the plan, or any object with those attributes). ``flags``: the call's on/off options,
    checked first. ``epsilon``: whether the call takes one. ``in_place``: (written, read) pairs that may be
    exactly the same memory, of one dtype then; ``in_place_when``: a Fact saying per call whether they may
    (None: always). ``strides``: the row operands' stride arguments in the order they are checked, where that
    is not the operands' (input_stride before out_stride, as the signatures have them). ``its_elements``: misalignment says "as its float32 elements must be" (the quantizing
    ops, whose operands are of several kinds), not "as float32 elements must be". ``sizes(num_tokens,
    hidden_size)``: the rows and hidden size of the call (the N-D form reads leading sizes)."""

    operands: tuple[Memory, ...]
    facts: Callable[[dict, int, int], Any]
    flags: tuple[str, ...] = ("pdl",)
    epsilon: bool = True
    in_place: tuple[tuple[str, str], ...] = ()
    in_place_when: Fact | None = None
    strides: tuple[str, ...] = ()
    its_elements: bool = False
    sizes: Callable[[Any, Any], tuple[int, int]] = check.sizes


def statistic(name: str, *, written: bool) -> Memory:
    """A row statistic the forward saves for the backward (mean, rstd): one float32 per row where the call gives
    one, any bad value refused in one sentence."""
    return Memory(name, dtypes.FLOAT32, span=PER_ROW, written=written, optional=True,
                  refusal="must be a non-null, 4-byte aligned device pointer to num_tokens float32 (or such an array)")


def explain(declaration: Declaration, call: dict) -> Any:
    """Raise the error naming what is wrong with ``call`` (the op's arguments by name), checked as
    ``declaration`` says; where nothing is, return the facts (for a launch that needs what the hook read)."""
    for name in declaration.flags:
        check.flag(name, call[name])
    for memory in declaration.operands:  # a layout for rows that are not there: refused before anything is sized
        if memory.optional and memory.stride and call[memory.key or memory.name] is None and (
                call[memory.stride] is not None):
            raise ValueError(f"{memory.stride} applies with a {memory.name} only, got {memory.stride}="
                             f"{call[memory.stride]!r} and {memory.name}=None")
    num_tokens, hidden = declaration.sizes(call["num_tokens"], call["hidden_size"])
    if declaration.epsilon:
        check.epsilon(call["epsilon"])
    facts = declaration.facts(call, num_tokens, hidden)
    present = []  # (memory, pointer, element) of the operands this call has
    for memory in declaration.operands:
        key = memory.key or memory.name
        value, element = _read(key, facts) if isinstance(key, Fact) else call[key], _read(memory.element, facts)
        if element is not None and not (memory.optional and value is None):
            present.append((memory, value, element))
    for memory, value, element in present:
        if memory.refusal and (type(value) is not int or value <= 0 or value % element.itemsize):
            raise ValueError(f"{memory.name} {memory.refusal}, got {value!r}")
        if type(value) is not int:
            raise TypeError(f"{memory.name} must be {_read(memory.kind, facts)}, got {type(value).__name__}")
    rows = {memory.stride: memory.name for memory, _, _ in present if memory.stride}
    order = [name for name in declaration.strides if name in rows] + [name for name in rows
                                                                       if name not in declaration.strides]
    strides = {rows[name]: check.stride_arg(name, call[name], hidden) for name in order}
    its = "its " if declaration.its_elements else ""
    layouts = {}  # name -> (row stride, elements per row)
    for memory, ptr, element in present:
        if ptr <= 0:
            raise ValueError(f"{memory.name} must be a non-null device pointer, got {ptr}")
        if ptr % element.itemsize:
            raise ValueError(f"{memory.name} pointer {ptr:#x} is not aligned to {element.itemsize} bytes, as "
                             f"{its}{element.name} elements must be")
        layouts[memory.name] = (strides[memory.name], hidden) if memory.stride else _read(memory.span, facts) or (
            0, hidden)
    for name in [*strides, *layouts]:  # the rows in their strides' order, then any other span of several rows
        if layouts[name][0]:
            check.extent(name, num_tokens, *layouts[name])
    regions = {memory.name: (memory, check.span(ptr, num_tokens if layouts[memory.name][0] else 1,
                                                *layouts[memory.name], element.itemsize))
               for memory, ptr, element in present}
    elements = {memory.name: element for memory, _, element in present}
    pairs = [(w, r) for w, r in declaration.in_place if w in regions and r in regions]
    for written, read in pairs:
        check.in_place_dtypes(call[written], call[read], elements[written], elements[read], read, written)
    if declaration.in_place_when is not None and not _read(declaration.in_place_when, facts):
        pairs = []
    names = list(regions)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ma, span_a), (mb, span_b) = regions[a], regions[b]
            if ma.written or mb.written:
                in_place = (a, b) in pairs or (b, a) in pairs
                check.no_partial_overlap(check.Operand(a, span_a[0]), span_a, check.Operand(b, span_b[0]), span_b,
                                         may_alias=in_place)
    stream = call["stream"]
    check.stream(stream)
    _placement.check(driver.selected_device(), {name: span[0] for name, (_, span) in regions.items()}, stream)
    return facts


def _read(field, facts):
    """A declaration's field for this call: a Fact's attribute of the facts, else the field as declared."""
    return getattr(facts, field.name) if isinstance(field, Fact) else field

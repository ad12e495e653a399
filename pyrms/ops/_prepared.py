"""Prepared launches: everything about a call that does not change between calls (plan, kernels,
launch shape, every static check) resolved once per (device, op, dtype, hidden, layout, options).

Each op defines its Prepared class (its per-call checks are inline there: they are the hot path);
this module keeps them in the device's bounded dict (``Device.prepared``), keyed by the op's
PreparedCache and its static arguments exactly as the caller passed them, so that a repeated call
costs one dict lookup. Where the process
sees several devices, a Prepared also checks per call, without a driver call, that its pointers and
stream were accepted for its device before (``_placement.Placed``; ``_placement`` says what is
checked where).
"""
from __future__ import annotations

from .. import driver, errors, launch
from ._operands import FLOAT32_MAX, flag

LIMIT = 4096  # prepared launches kept per device, whatever shapes a long-running server meets


class LastCall:
    """An op's last call on raw pointers, bound (pyrms.launch.BoundLaunch: packed once, one driver call per
    launch) once the same call comes twice in a row, so that a caller repeating a call (a decode step's norms on
    fixed buffers) pays for its checks once.

    ``pair`` is (key, BoundLaunch or None), one object, so that threads read a key with its own launch. The op's
    hot path builds ``key`` from every argument, the calling thread's selected device and whatever else its
    checks read (the few-row threshold) and compares it with ``pair[0]``; where they are equal and the values
    the per-call checks take are of the types those checks accept (equal values of other types, ``True == 1``,
    must reach the checks that refuse them), it launches ``pair[1]``, and where that is still None (the second
    call) it launches as usual and then ``bind``s. Any other call replaces the key, with None."""

    __slots__ = ("pair",)

    def __init__(self):
        self.pair: tuple[tuple, launch.BoundLaunch | None] = ((), None)

    def launch(self, key: tuple, prepared, args: tuple) -> bool:
        """``prepared(*args)`` through this memo, ``key`` standing for the call (the caller's values of the types
        its checks take, and whatever else they read): the bound launch where ``key`` is the last call's and bound;
        else ``prepared(*args)``, bound where ``key`` repeats the last call. True where it launched, False where
        ``prepared`` is None or declined (launching nothing)."""
        last = self.pair
        repeated = last[0] == key
        if repeated and last[1] is not None:
            last[1]()
            return True
        if not repeated:
            self.pair = (key, None)
        if prepared is None or not prepared(*args):
            return False
        if repeated:  # the same call twice in a row: bound for the next ones
            self.bind(key, prepared, *args)
        return True

    def bind(self, key: tuple, prepared, *args) -> None:
        """Keep for ``key`` the BoundLaunch of ``prepared(*args)``, a call of a prepared launch that has just
        launched: its launch recorded by calling it again in binding mode. Not inside a call being bound itself
        (pyrms.bind records that one), nor where the prepared launch declines the repeat."""
        if launch.binding_now():
            return
        with launch.binding() as made:
            launched = prepared(*args)
        if launched and made:
            self.pair = (key, launch.bound(made))


class PreparedCache:
    """Prepared launches of one op, kept in each device's ``prepared`` dict under keys that begin with
    this object; ``factory(device, *static_args)`` builds one, raising TypeError/ValueError for
    arguments it cannot accept. An op's inlined hot path looks up
    ``driver._selected.device.prepared[(cache, *static_args)]`` itself. ``last``: the op's last call on raw
    pointers (LastCall), for the ops whose hot path binds it when it repeats."""

    __slots__ = ("factory", "last")

    def __init__(self, factory):
        self.factory = factory
        self.last = LastCall()

    def get(self, *static_args):
        """The prepared launch, or None where the arguments are unhashable or invalid (the caller's
        general path then raises the error that names them)."""
        try:
            device = driver.selected_device()
        except errors.NoDriverError:  # reported after the arguments are checked
            return None
        key = (self, *static_args)
        try:
            return device.prepared[key]
        except KeyError:
            pass
        except TypeError:
            return None
        try:
            prepared = self.factory(device, *static_args)
        except (TypeError, ValueError):
            return None
        return _keep(device.prepared, key, prepared)

    def require(self, *static_args):
        """The prepared launch; the factory's error where the arguments are invalid."""
        device = driver.selected_device()
        key = (self, *static_args)
        prepared = device.prepared.get(key)
        return prepared if prepared is not None else _keep(device.prepared, key, self.factory(device, *static_args))

    def of(self, device) -> dict:
        """This op's prepared launches on ``device``, by static arguments (a copy: for tests and tools)."""
        return {key[1:]: prepared for key, prepared in device.prepared.items() if key[0] is self}

    def forget(self, device) -> None:
        """Drop this op's prepared launches on ``device`` (tools that change what a factory builds), and its last
        call's bound launch."""
        for key in [key for key in device.prepared if key[0] is self]:
            del device.prepared[key]
        self.last.pair = ((), None)


def _keep(items: dict, key, prepared):
    if len(items) >= LIMIT:
        items.clear()
    items[key] = prepared
    return prepared


class Pointers:
    """The per-call checks of a prepared launch's pointers, for ops without a hand-inlined path:
    non-null, element-aligned, and no overlap between what it writes and anything else it touches
    (except exactly the same memory where in place is allowed).

    Operands are given in call order as (itemsize, row stride in elements, or 0 for a [hidden] vector),
    or (itemsize, row stride, elements per row) for an operand whose rows are not `hidden` long (one
    scale per row: (4, 1, 1)); ``pairs`` are (i, j, in_place_allowed) index pairs whose spans must be
    disjoint.
    """

    __slots__ = ("spans", "pairs")

    def __init__(self, hidden: int, operands, pairs):
        # Per operand (itemsize, bytes from one row to the next, bytes of one row): an operand's span over
        # `rows` rows is then one multiply-add per call, the same for [hidden] vectors (no step). Resolved
        # here, not per call: the per-call unpacking of optional lengths cost fused add and LayerNorm about
        # 5 % of their host time (measured on the H200's host, interleaved runs: docs/perf_notes.md).
        self.spans = tuple((itemsize, stride * itemsize, (length[0] if length else hidden) * itemsize)
                           for itemsize, stride, *length in operands)
        self.pairs = tuple(pairs)

    def ok(self, pointers, rows: int) -> bool:
        ends = []
        for ptr, (itemsize, step, row_bytes) in zip(pointers, self.spans):
            if ptr <= 0 or ptr % itemsize:
                return False
            ends.append(ptr + (rows - 1) * step + row_bytes)
        for i, j, in_place in self.pairs:
            if pointers[i] < ends[j] and pointers[j] < ends[i] and not (
                    in_place and pointers[i] == pointers[j] and ends[i] == ends[j]):
                return False
        return True


def scalars_ok(epsilon, num_tokens, max_rows: int) -> bool:
    """The per-call scalar checks: an int row count in range, a float epsilon within float32 (NaN fails)."""
    return (type(num_tokens) is int and 0 < num_tokens <= max_rows and type(epsilon) is float
            and 0.0 <= epsilon <= FLOAT32_MAX)


def use_pdl(device, pdl) -> bool:
    """Whether launches on `device` use programmatic dependent launch: asked for (True or False, a
    TypeError otherwise) and supported (compute capability 9.0 and later, where griddepcontrol exists)."""
    return flag("pdl", pdl) and device.compute_capability >= (9, 0)


class RowLaunches:
    """The kernels and launches of an op on the row core (row_core.cuh): one for many rows (plan.block
    threads per row) and two for few (plan.latency_block threads, the weights loaded early), of which
    the ALIGNED one serves calls whose every pointer is 16-byte aligned (32 where plan.align_mask says so:
    an fp32 output beside 2-byte rows) when the layout allows it (plan.aligned_layout). The kernels
    compute the same bits."""

    __slots__ = ("many", "few", "few_aligned", "launch_many", "launch_few", "aligned_layout", "align_mask")

    def __init__(self, plan, tail: tuple, device, pdl: bool, strides: tuple):
        signature = plan.signature
        self.many = launch.get_kernel(plan.source, plan.expression, plan.group, signature, device)
        self.few = launch.get_kernel(plan.source, plan.latency_expression, plan.group, signature, device)
        self.few_aligned = launch.get_kernel(plan.source, plan.aligned_latency_expression, plan.group, signature, device)
        self.launch_many = launch.RowLaunch(signature, plan.block, tail, device, pdl=pdl)
        self.launch_few = launch.RowLaunch(signature, plan.latency_block, tail, device, pdl=pdl)
        self.aligned_layout = plan.aligned_layout(*strides)
        self.align_mask = plan.align_mask

    def few_kernel(self, pointers_or: int):
        """The few-row kernel for pointers whose bitwise or is `pointers_or` (align_mask's test)."""
        return self.few_aligned if self.aligned_layout and not pointers_or & self.align_mask else self.few

    def __call__(self, few_rows: int, rows: int, stream: int, pointers_or: int, *head) -> None:
        """Launch on `rows` rows: the few-row kernel up to `few_rows` of them (the op's threshold,
        plan.FEW_ROWS unless tests.support.testing.forced_row_variant says otherwise). `pointers_or`: the
        bitwise or of the row and vector pointers, for the alignment test."""
        if rows <= few_rows:
            self.launch_few(self.few_kernel(pointers_or), rows, stream, *head)
        else:
            self.launch_many(self.many, rows, stream, *head)

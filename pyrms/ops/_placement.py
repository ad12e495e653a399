"""Which device an op's memory and stream belong to: a pointer or a stream of another device than the
launch's is refused before any launch, with the argument, its device and the launch's device named.

What is checked where. In a process that sees one device, all memory and every stream are its own:
nothing is checked or kept, and the prepared launches carry no check (``for_device`` gives None).
With two or more devices:

- Arrays (pyrms Tensors, torch tensors, DLPack, ``__cuda_array_interface__``) carry their device,
  which ``_operands.arrays`` and ``_operands.same_device`` compare with the launch's on every call
  of the array path (the adapter asks the driver for CAI objects only, as before).
- Raw int pointers (arrays' pointers too, once they reach the raw-pointer path) and stream handles:
  the general path (``check``: the first call of a prepared launch, and any call it declines) asks
  the driver once per value it has not accepted for the launch's device before
  (cuPointerGetAttribute(DEVICE_ORDINAL) per pointer, cuStreamGetDevice per stream; a pyrms Stream
  that knows its device needs no query), refuses one of another device, and remembers the rest with
  the device each was accepted for. The prepared launch's per-call check (``Placed.ok``) is then one
  dict lookup per pointer and one for the stream, with no driver call; a value not accepted for its
  device yet declines the call, and the general path asks, refuses or remembers.
- The default streams 0 (NULL), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) are the current
  context's, which every launch makes its own device's: always accepted.
- Pointers the driver does not know (pageable host memory, freed memory) are trusted, as raw pointers
  always were. Not noticed: memory freed and allocated again at the same address on another device,
  or a destroyed stream's handle reused by the driver for a stream of another device, while the old
  answer is remembered (at most LIMIT pointers and LIMIT streams; each table is emptied when full).
  A stream so mistaken still fails at the launch, with the driver's error.
"""
from __future__ import annotations

from .. import driver

LIMIT = 4096  # remembered pointers, and stream handles, whatever a long-running process passes
DEFAULT_STREAMS = (0, 1, 2)
_SELECT = "(pyrms.driver.set_device selects the calling thread's device)"

# What was accepted for which device (raw pointer / stream handle -> ordinal) is kept in the process's
# state object (driver.process_state(): ``pointers``, ``streams``), which a Placed reads directly.


class Placed:
    """The per-call device check of the prepared launches of one device (see the module docstring)."""

    __slots__ = ("ordinal", "pointers", "streams")

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        state = driver.process_state()  # the tables themselves: a prepared launch lives no longer than they do
        self.pointers, self.streams = state.pointers, state.streams

    def ok(self, pointers, stream: int) -> bool:
        """Whether every pointer and the stream (a raw handle) were accepted for this device before;
        no driver call."""
        ordinal, seen = self.ordinal, self.pointers
        for ptr in pointers:
            if seen.get(ptr) != ordinal:
                return False
        return stream in DEFAULT_STREAMS or self.streams.get(stream) == ordinal


def for_device(device: driver.Device) -> Placed | None:
    """The per-call check for prepared launches on ``device``; None where the process sees one device."""
    return Placed(device.ordinal) if driver.device_count() > 1 else None


def check(device: driver.Device, pointers: dict[str, int], stream) -> None:
    """Refuse any raw pointer of ``pointers`` (argument name -> address) or ``stream`` (anything
    ``driver.stream_handle`` takes) that belongs to another device than ``device``: ValueError naming
    the argument, its device and the launch's. Asks the driver about each value not accepted for
    ``device`` before and remembers what passes. Nothing where the process sees one device."""
    if driver.device_count() < 2:
        return
    ordinal, state = device.ordinal, driver.process_state()
    for name, ptr in pointers.items():
        if state.pointers.get(ptr) == ordinal:
            continue
        owner = driver.pointer_device(ptr)
        if owner is not None and owner != ordinal:
            raise ValueError(f"{name} pointer {ptr:#x} is on device {owner}, but the launch runs on device {ordinal} "
                             + _SELECT)
        _remember(state.pointers, ptr, ordinal)
    handle = driver.stream_handle(stream)
    if handle in DEFAULT_STREAMS or state.streams.get(handle) == ordinal:
        return
    known = stream.device if isinstance(stream, driver.Stream) else None
    owner = known.ordinal if known is not None else driver.stream_device(handle)
    if owner != ordinal:
        raise ValueError(f"stream {handle:#x} belongs to device {owner}, but the launch runs on device {ordinal}, "
                         f"where its operands are: pass a stream of device {ordinal} or None " + _SELECT)
    _remember(state.streams, handle, ordinal)


def _remember(table: dict[int, int], value: int, ordinal: int) -> None:
    if len(table) >= LIMIT:
        table.clear()
    table[value] = ordinal

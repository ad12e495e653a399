"""Scratch device memory for the backward kernels' per-chunk column sums, cached per (device, stream).

A workspace is reused only by work queued on the same stream, which the stream itself orders: the
next launch pair that uses it starts after the previous pair has finished reading it. Two threads
queueing on one stream could still interleave two pairs (A's first kernel, B's first kernel, A's
sum...), so the slot's lock is held across a pair's two launches (launches are asynchronous: it is
held for microseconds). The per-thread default stream is a different stream in every thread, so
its slot is per thread.

Freeing a buffer (to grow it, or in release_workspaces) first waits for the whole device, not just
the slot's stream: a stream destroyed with work in flight may have handed its handle to a new one.
That case still has a hazard the cache cannot see: a stream destroyed while a backward pass on it is
in flight, and a new stream that gets the same handle at once, share the buffer (as do a thread that
ends with work in flight on the per-thread default stream and a new thread given its ident).
Synchronize a stream before destroying it, or pass ``workspace=`` to the ops. The cache keeps one buffer per stream ever
used; release_workspaces() frees them all.

Not for CUDA graph capture: a captured launch keeps the buffer's address, which a later growth or
release_workspaces() frees. Pass ``workspace=`` (memory you own) when capturing.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from .. import driver

_PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD
_GRANULE = 2 << 20  # allocations are rounded up to this, so slowly growing batches rarely reallocate


class _Slot:
    __slots__ = ("lock", "buffer", "device")

    def __init__(self, device: driver.Device):
        self.lock = threading.Lock()
        self.buffer: driver.DeviceBuffer | None = None
        self.device = device

    def drop(self) -> None:
        """Free the buffer once the device is idle (the caller holds the lock)."""
        if self.buffer is not None:
            self.device.synchronize()
            self.buffer.close()
            self.buffer = None


_slots: dict[tuple, _Slot] = {}
_slots_lock = threading.Lock()


@contextlib.contextmanager
def borrowed(device: driver.Device, stream: int, nbytes: int) -> Iterator[int]:
    """The address of at least `nbytes` of workspace for work queued on `stream` (a raw handle) inside
    the block; other users of the same slot wait until the block ends."""
    key = (device.ordinal, stream, threading.get_ident() if stream == _PER_THREAD_STREAM else None)
    with _slots_lock:
        slot = _slots.get(key)
        if slot is None:
            slot = _slots[key] = _Slot(device)
    with slot.lock:
        if slot.buffer is None or slot.buffer.nbytes < nbytes:
            slot.drop()
            slot.buffer = driver.DeviceBuffer(-(-nbytes // _GRANULE) * _GRANULE, device)
        yield slot.buffer.ptr


def release_workspaces() -> None:
    """Free every cached workspace, each once its device is idle."""
    with _slots_lock:
        slots = list(_slots.values())
    for slot in slots:  # the slots stay registered: a thread may be waiting for one's lock
        with slot.lock:
            slot.drop()


def cached_bytes() -> int:
    """Bytes of device memory the cache holds now."""
    with _slots_lock:
        return sum(s.buffer.nbytes for s in _slots.values() if s.buffer is not None)

"""Scratch device memory for the backward kernels' per-chunk column sums, stream-ordered.

Each backward call without ``workspace=`` takes its workspace from pyrms's memory pool of the device
on the call's own stream (``driver.MemoryPool.allocate``: cuMemAllocFromPoolAsync) and gives it back on
that stream right after queueing its kernels (cuMemFreeAsync). The stream orders the three, so:

- the memory is reused only after the kernels that read it have finished, however the stream is used,
  synchronized or destroyed afterwards, and calls on different streams or threads never share it;
- nothing is kept per stream: a server that makes a stream per request holds no memory for the
  streams it has closed (the first design kept a buffer per stream handle ever used);
- under CUDA graph capture the allocation and the free become the graph's memory nodes, so a captured
  backward pass owns its workspace.

The pool keeps up to KEEP_BYTES of freed memory reserved across synchronizations, so repeated calls
reuse it without going back to the driver's allocator; ``release_workspaces()`` returns it all. Each
device's pool is kept in its Device (``Device.workspace``).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from .. import driver, errors, launch

# Freed workspace memory the pool keeps for reuse across synchronizations (its release threshold):
# the largest common workspace, LayerNorm's at 32768 x 8192, is 134 MB.
KEEP_BYTES = 256 << 20

_pools_lock = threading.Lock()


def _pool(device: driver.Device) -> driver.MemoryPool:
    pool = device.workspace
    if pool is None:
        with _pools_lock:
            pool = device.workspace
            if pool is None:
                try:
                    pool = driver.MemoryPool(device, keep_bytes=KEEP_BYTES)
                except errors.CudaError as exc:  # e.g. a virtual GPU without memory pools
                    raise type(exc)(exc.call, exc.status, exc.name,
                                    f"{exc.description} (the backward's workspace pool on device {device.ordinal}; "
                                    "pass workspace=, of pyrms.backward_workspace_bytes(...) bytes, instead)") from None
                device.workspace = pool
    return pool


@contextlib.contextmanager
def borrowed(device: driver.Device, stream: int, nbytes: int) -> Iterator[int]:
    """The address of `nbytes` of workspace for the work queued on `stream` (a raw handle) inside the
    block; freed on `stream` when the block ends, also when it raises (after whatever it queued). A call being
    bound (pyrms.bind) cannot borrow: the workspace would be freed before the bound launches ran."""
    if launch.binding_now():
        raise ValueError("a call that borrows its workspace per call cannot be bound (pyrms.bind): pass "
                         "workspace=, of pyrms.backward_workspace_bytes(...) bytes")
    pool = _pool(device)
    ptr = pool.allocate(nbytes, stream)
    try:
        yield ptr
    finally:
        pool.free(ptr, stream)


def pools() -> list[driver.MemoryPool]:
    """The workspace pools made so far, one per device that ran a backward without ``workspace=``."""
    with _pools_lock:
        devices = list(driver.process_state().devices.values())
    return [device.workspace for device in devices if device.workspace is not None]


def release_workspaces() -> None:
    """Return the memory the workspace pools keep for reuse to the device, each once its device is
    idle (so that the frees queued by earlier calls have taken effect)."""
    for pool in pools():
        pool.device.synchronize()
        pool.trim(0)


def cached_bytes() -> int:
    """Bytes of device memory the workspace pools hold now (in use by queued work, or kept for reuse)."""
    return sum(pool.reserved_bytes for pool in pools())

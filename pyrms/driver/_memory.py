"""Memory: device allocations (``DeviceBuffer``, cuMemAlloc), stream-ordered pools (``MemoryPool``),
page-locked host memory (``PinnedBuffer``), and which device owns a pointer. Allocations are made in
the device's primary context; running out names the request and the device's free memory."""
from __future__ import annotations

import ctypes
import operator

import numpy as np
import numpy.typing as npt
from cuda.bindings import driver as _cu

from .. import errors
from ..errors import check
from ._device import Device
from ._owned import _Owned
from ._process import DeviceLike, ensure_context, resolve_device
from ._stream import stream_arg


def _nbytes(value) -> int:
    try:
        nbytes = operator.index(value)
    except TypeError:
        nbytes = 0
    if isinstance(value, bool) or nbytes <= 0:
        raise ValueError(f"nbytes must be an int > 0, got {value!r}")
    if nbytes >= 2**64:  # cuda.bindings would fail converting it to size_t, with no word of nbytes
        raise ValueError(f"nbytes must be below 2**64, got {nbytes}")
    return nbytes


class DeviceBuffer(_Owned):
    """``nbytes`` of device memory (cuMemAlloc) in ``device``'s primary context."""

    def __init__(self, nbytes: int, device: DeviceLike = None) -> None:
        nbytes = _nbytes(nbytes)
        device = resolve_device(device)
        try:
            ptr = check(_cu.cuMemAlloc(nbytes), "cuMemAlloc")
        except errors.OutOfMemoryError as exc:
            raise _out_of_memory(exc, nbytes, device) from None
        self._ptr = int(ptr)
        self.nbytes = nbytes
        self._own(device, [(_cu.cuMemFree, ptr, "cuMemFree")])

    @property
    def ptr(self) -> int:
        if self._closed:
            raise ValueError("buffer is closed")
        return self._ptr

    def __repr__(self) -> str:
        where = "closed" if self._closed else hex(self._ptr)
        return f"<pyrms DeviceBuffer {self.nbytes} bytes on device {self.device.ordinal}, {where}>"


class MemoryPool(_Owned):
    """A stream-ordered memory pool of ``device`` (cuMemPoolCreate), for scratch memory whose life is
    a span of one stream's work: ``allocate(nbytes, stream)`` returns memory that work queued on
    ``stream`` after the call may use, ``free(ptr, stream)`` returns it once the work queued before
    the free has finished. The stream orders both, so nothing waits on the host, and memory freed on
    one stream is never handed to another stream's work that could still overlap it. Freed memory
    stays reserved for reuse up to ``keep_bytes`` across synchronizations (the release threshold);
    ``trim()`` returns what is not in use to the device. Under graph capture, ``allocate`` and
    ``free`` become the graph's memory nodes."""

    _ATTR = _cu.CUmemPool_attribute

    def __init__(self, device: DeviceLike = None, keep_bytes: int = 0) -> None:
        device = resolve_device(device)
        device.make_current()
        props = _cu.CUmemPoolProps()
        props.allocType = _cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = _cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = _cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = device.ordinal
        pool = check(_cu.cuMemPoolCreate(props), "cuMemPoolCreate")
        # Destroying a pool with allocations outstanding is allowed: the driver frees it after them.
        self._own(device, [(_cu.cuMemPoolDestroy, pool, "cuMemPoolDestroy")])
        self._pool = pool
        check(_cu.cuMemPoolSetAttribute(pool, self._ATTR.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                        _cu.cuuint64_t(max(0, int(keep_bytes)))), "cuMemPoolSetAttribute")

    def _live(self):
        if self._closed:
            raise ValueError("memory pool is closed")
        return self._pool

    def allocate(self, nbytes: int, stream=None) -> int:
        """``nbytes`` from the pool, ordered on ``stream``: the address, for work queued after this."""
        nbytes = _nbytes(nbytes)
        pool = self._live()
        self.device.make_current()
        try:
            return int(check(_cu.cuMemAllocFromPoolAsync(nbytes, pool, stream_arg(stream)), "cuMemAllocFromPoolAsync"))
        except errors.OutOfMemoryError as exc:
            raise _out_of_memory(exc, nbytes, self.device) from None

    def free(self, ptr: int, stream=None) -> None:
        """Return ``ptr`` (from ``allocate``) to the pool once the work queued on ``stream`` so far is done."""
        self._live()
        self.device.make_current()
        check(_cu.cuMemFreeAsync(ptr, stream_arg(stream)), "cuMemFreeAsync")

    def trim(self, keep_bytes: int = 0) -> None:
        """Return reserved memory that no allocation uses to the device, down to ``keep_bytes``."""
        check(_cu.cuMemPoolTrimTo(self._live(), max(0, int(keep_bytes))), "cuMemPoolTrimTo")

    def _bytes(self, attribute) -> int:
        return int(check(_cu.cuMemPoolGetAttribute(self._live(), attribute), "cuMemPoolGetAttribute"))

    @property
    def reserved_bytes(self) -> int:
        """Device memory the pool holds now, in use or kept for reuse."""
        return self._bytes(self._ATTR.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)

    @property
    def used_bytes(self) -> int:
        """Device memory of the pool's allocations not yet freed (stream order counted)."""
        return self._bytes(self._ATTR.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)


def _out_of_memory(exc: errors.OutOfMemoryError, nbytes: int, device: Device) -> errors.OutOfMemoryError:
    try:
        free, total = device.mem_info()
        state = f"{free} of {total} bytes are free"
    except errors.PyrmsError as info_exc:
        state = f"free memory unknown ({info_exc})"
    return errors.OutOfMemoryError(exc.call, exc.status, exc.name, f"{exc.description}: asked for "
                                   f"{nbytes} bytes on device {device.ordinal}, {state}")


class PinnedBuffer(_Owned):
    """``nbytes`` of page-locked host memory (cuMemHostAlloc, portable to every context)."""

    def __init__(self, nbytes: int, device: DeviceLike = None) -> None:
        nbytes = _nbytes(nbytes)
        device = resolve_device(device)
        self._ptr = int(check(_cu.cuMemHostAlloc(nbytes, _cu.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"))
        self.nbytes = nbytes
        self._own(device, [(_cu.cuMemFreeHost, self._ptr, "cuMemFreeHost")])

    @property
    def ptr(self) -> int:
        if self._closed:
            raise ValueError("buffer is closed")
        return self._ptr

    def numpy(self, dtype: npt.DTypeLike, count: int | None = None) -> np.ndarray:
        """A numpy view of the first ``count`` elements (default: as many as fit). The view keeps
        this buffer alive, but close() frees the memory under it: do not use it after close()."""
        dtype = np.dtype(dtype)
        if count is None:
            count = self.nbytes // dtype.itemsize
        if not 0 <= count * dtype.itemsize <= self.nbytes:
            raise ValueError(f"{count} elements of {dtype} do not fit in {self.nbytes} bytes")
        raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(self.ptr)
        raw._owner = self  # the array's base is ``raw``: this ties the buffer's lifetime to the view
        return np.frombuffer(raw, dtype=dtype, count=count)


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device owning ``ptr``, or None if the driver does not know the address
    (pageable host memory, freed or invalid pointers)."""
    ensure_context()
    result = _cu.cuPointerGetAttribute(_cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if result[0] == _cu.CUresult.CUDA_ERROR_INVALID_VALUE:
        return None
    return int(check(result, "cuPointerGetAttribute"))

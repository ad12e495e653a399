"""The CUDA driver: initialisation, devices and their primary contexts, streams, events, memory,
copies, module loading, kernel launches and graph capture.

The only module that imports ``cuda.bindings.driver``. Importing it touches no driver: the library
is loaded and ``cuInit`` called at first use, where a missing driver (or no device) becomes
``errors.NoDriverError``. Every call's status goes through ``errors.check``; on the hot-path calls
(``cuCtxGetCurrent``, ``cuLaunchKernel`` and ``cuLaunchKernelEx``) a one-comparison success test
comes first and only a failure is handed to ``check``, which costs a few hundred nanoseconds even on
success.

Memory is allocated in each device's *primary* context, the one the CUDA runtime uses, so pointers
are shared with PyTorch, CuPy and anything else built on the runtime API. Primary contexts are
retained once and never released: the driver tears them down at process exit.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import operator
import threading
import weakref
from typing import Iterator

import numpy as np
from cuda.bindings import driver as _cu

from . import errors
from .errors import check

_SUCCESS = _cu.CUresult.CUDA_SUCCESS
_LEGACY_STREAMS = (0, 1)  # NULL and CU_STREAM_LEGACY: the legacy default stream cannot be captured


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _describe(status) -> tuple[str, str]:
    """Name and description of a CUresult. Called by ``check`` itself, so it calls the driver
    directly; without a driver library it falls back on the enum's own name and docstring."""
    try:
        name_err, name = _cu.cuGetErrorName(status)
        text_err, text = _cu.cuGetErrorString(status)
        if name_err == _SUCCESS and text_err == _SUCCESS:
            return name.decode(), text.decode()
    except Exception:  # the driver library is missing: describe the status without it
        pass
    doc = getattr(status, "__doc__", None)
    if not doc or doc == type(status).__doc__:
        doc = "(the CUDA driver is not available to describe it)"
    return getattr(status, "name", str(status)), " ".join(doc.split())


errors.register_describer(_cu.CUresult, _describe)
errors.register_error_class(_cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, errors.OutOfMemoryError)

# ---------------------------------------------------------------------------------------------
# Initialisation

_init_lock = threading.Lock()
_initialized = False
_init_failure: str | None = None  # kept: a driver does not appear later in the same process


def _ensure_init() -> None:
    """cuInit(0) once per process; any failure becomes NoDriverError, raised now and on every use."""
    global _initialized, _init_failure
    if _initialized:
        return
    with _init_lock:
        if not _initialized and _init_failure is None:
            try:
                check(_cu.cuInit(0), "cuInit")
                _initialized = True
            except Exception as exc:  # DynamicLibNotFoundError (a RuntimeError), OSError, CudaError...
                _init_failure = _one_line(exc)
    if _init_failure is not None:
        raise errors.NoDriverError(f"no CUDA driver found: {_init_failure}")


def unavailable_reason() -> str | None:
    """None if a driver and at least one device are usable, else a one-line reason. Never raises."""
    try:
        count = device_count()
    except Exception as exc:
        return _one_line(exc)
    return None if count > 0 else "the CUDA driver reports no devices"


def driver_version() -> str | None:
    """The CUDA version the installed driver supports, e.g. '13.0', or None without a driver.
    Never raises, and needs no cuInit: for reports such as ``python -m pyrms.info``."""
    try:
        version = check(_cu.cuDriverGetVersion(), "cuDriverGetVersion")
    except Exception:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


# ---------------------------------------------------------------------------------------------
# Devices


class Device:
    """One CUDA device and its primary context. Get it from ``get_device`` or ``current_device``."""

    def __init__(self, ordinal: int, handle):
        self.ordinal = ordinal
        self._handle = handle
        self._context = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<pyrms Device {self.ordinal}>"

    def _attribute(self, attribute) -> int:
        return check(_cu.cuDeviceGetAttribute(attribute, self._handle), "cuDeviceGetAttribute")

    @functools.cached_property
    def name(self) -> str:
        raw = check(_cu.cuDeviceGetName(256, self._handle), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode(errors="replace").strip()

    @functools.cached_property
    def compute_capability(self) -> tuple[int, int]:
        attr = _cu.CUdevice_attribute
        return (self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    @property
    def arch(self) -> str:
        """The NVRTC arch of this device, e.g. "sm_90"."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @functools.cached_property
    def multiprocessor_count(self) -> int:
        return self._attribute(_cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)

    @functools.cached_property
    def l2_cache_bytes(self) -> int:
        return self._attribute(_cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)

    @functools.cached_property
    def max_threads_per_block(self) -> int:
        return self._attribute(_cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)

    @functools.cached_property
    def max_shared_memory_per_block_optin(self) -> int:
        """Largest dynamic shared memory a kernel may opt into (see Kernel.set_max_dynamic_shared)."""
        return self._attribute(_cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    @functools.cached_property
    def total_memory(self) -> int:
        return check(_cu.cuDeviceTotalMem(self._handle), "cuDeviceTotalMem")

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory, as the driver reports them now."""
        self.make_current()
        return check(_cu.cuMemGetInfo(), "cuMemGetInfo")

    def _primary_context(self):
        if self._context is None:
            with self._lock:
                if self._context is None:
                    self._context = check(_cu.cuDevicePrimaryCtxRetain(self._handle),
                                          "cuDevicePrimaryCtxRetain")
        return self._context

    def make_current(self) -> None:
        """Make this device's primary context current on the calling thread, if it is not already."""
        context = self._context if self._context is not None else self._primary_context()
        result = _cu.cuCtxGetCurrent()
        if result[0]:
            check(result, "cuCtxGetCurrent")
        if not result[1] == context:  # CUcontext compares handle values
            check(_cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    @contextlib.contextmanager
    def _pushed(self) -> Iterator[None]:
        """This device's context current inside the block, the caller's restored after: for cleanup,
        which may run on any thread at any time (garbage collection) and must not switch devices."""
        check(_cu.cuCtxPushCurrent(self._primary_context()), "cuCtxPushCurrent")
        try:
            yield
        finally:
            check(_cu.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def synchronize(self) -> None:
        """Wait for all work on this device's primary context."""
        self.make_current()
        check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")


_devices: dict[int, Device] = {}
_devices_lock = threading.Lock()
class _Selected(threading.local):
    """The calling thread's selected device (see set_device), like cudaSetDevice and
    torch.cuda.set_device. The class default makes an unset one a plain read: getattr with a default
    on a thread-local raises and catches AttributeError inside, about 1 µs on every launch."""

    device: "Device | None" = None


_selected = _Selected()


_device_count: int | None = None


def device_count() -> int:
    """How many CUDA devices this process sees (asked once: the count cannot change in a process);
    NoDriverError without a driver."""
    global _device_count
    if _device_count is None:
        _ensure_init()
        _device_count = check(_cu.cuDeviceGetCount(), "cuDeviceGetCount")
    return _device_count


def get_device(ordinal: int = 0) -> Device:
    """The Device of ``ordinal`` (one object per ordinal). ValueError names the allowed range."""
    device = _devices.get(ordinal) if type(ordinal) is int else None
    if device is not None:
        return device
    if isinstance(ordinal, bool):
        raise TypeError(f"device ordinal must be an int, got {ordinal!r}")
    try:
        ordinal = operator.index(ordinal)
    except TypeError:
        raise TypeError(f"device ordinal must be an int, got {type(ordinal).__name__} {ordinal!r}") from None
    count = device_count()
    if not 0 <= ordinal < count:
        allowed = f"0..{count - 1}" if count else "none"
        raise ValueError(f"device ordinal {ordinal} is out of range: this machine has {count} "
                         f"CUDA device(s), ordinals {allowed}")
    with _devices_lock:
        device = _devices.get(ordinal)
        if device is None:
            device = _devices[ordinal] = Device(ordinal, check(_cu.cuDeviceGet(ordinal), "cuDeviceGet"))
    return device


def set_device(ordinal: int) -> Device:
    """Select the calling thread's device (default 0) and make it current."""
    device = get_device(ordinal)
    _selected.device = device
    device.make_current()
    return device


def selected_device() -> Device:
    """The calling thread's selected device, without touching the current context: for callers
    that launch through a Kernel, which makes its own context current."""
    device = _selected.device
    if device is None:  # nothing selected on this thread: device 0, remembered (set_device overrides)
        device = _selected.device = get_device(0)
    return device


def current_device() -> Device:
    """The calling thread's selected device (see set_device), made current."""
    device = selected_device()
    device.make_current()
    return device


def resolve_device(device=None) -> Device:
    """A Device from None (the current one), an ordinal or a Device; made current."""
    if device is None:
        return current_device()
    if not isinstance(device, Device):
        device = get_device(device)
    device.make_current()
    return device


def _ensure_context() -> None:
    """Some context current on this thread: the selected device's if there is none. Another
    library's choice (torch.cuda.set_device) is left alone, since unified addressing lets copies
    and pointer queries work from any context."""
    _ensure_init()
    if int(check(_cu.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
        current_device()


def synchronize() -> None:
    """Wait for all work in the calling thread's current context."""
    _ensure_context()
    check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")


# ---------------------------------------------------------------------------------------------
# Owned handles


def _release(device: Device | None, resources: list, quiet: bool) -> None:
    """Destroy ``(destroy, handle, call)`` resources with ``device``'s context pushed. Finalizers pass
    quiet=True: at garbage collection or interpreter exit an exception could only be printed."""
    try:
        with device._pushed() if device is not None else contextlib.nullcontext():
            for destroy, handle, call in resources:
                check(destroy(handle), call)
    except Exception:
        if not quiet:
            raise


class _Owned:
    """Base of objects owning driver handles: ``close()`` frees them (idempotent), else a
    ``weakref.finalize`` does at garbage collection or exit. No ``__del__``: it could raise at shutdown."""

    def _own(self, device: Device | None, resources: list) -> None:
        self.device = device
        self._resources = resources  # Graph appends to it once its handles exist
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, device, resources, True)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Free the driver handles now; later calls do nothing."""
        self._closed = True
        if self._finalizer.detach() is not None:
            _release(self.device, self._resources, False)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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


# ---------------------------------------------------------------------------------------------
# Streams and events


class Stream(_Owned):
    """A CUDA stream: created here (and destroyed by close()) or wrapped from a raw handle."""

    def __init__(self, device=None, non_blocking: bool = False):
        device = resolve_device(device)
        flags = (_cu.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking
                 else _cu.CUstream_flags.CU_STREAM_DEFAULT)
        self._stream = check(_cu.cuStreamCreate(flags), "cuStreamCreate")
        self._own(device, [(_cu.cuStreamDestroy, self._stream, "cuStreamDestroy")])

    @classmethod
    def wrap(cls, handle: int, device=None) -> "Stream":
        """A Stream around a raw CUstream handle that someone else owns: never destroyed here.
        ``device`` (ordinal or Device) is recorded if given; None means unknown, and then no
        driver call is made."""
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"stream handle must be an int, got {type(handle).__name__} {handle!r}")
        if not 0 <= handle < 2**64:
            raise ValueError(f"stream handle must be >= 0 and below 2**64, got {handle}")
        stream = cls.__new__(cls)
        stream._stream = _cu.CUstream(handle)
        if device is not None and not isinstance(device, Device):
            device = get_device(device)
        stream._own(device, [])
        return stream

    def _live(self):
        if self._closed:
            raise ValueError("stream is closed")
        return self._stream

    @property
    def handle(self) -> int:
        """The raw CUstream handle as an int."""
        return int(self._live())

    def synchronize(self) -> None:
        """Wait until all work queued on the stream has finished."""
        check(_cu.cuStreamSynchronize(self._live()), "cuStreamSynchronize")

    def __repr__(self) -> str:
        state = "closed" if self._closed else hex(int(self._stream))
        return f"<pyrms Stream {state}>"


def stream_handle(stream) -> int:
    """The raw handle of a pyrms Stream, an int handle, an object with an int ``.cuda_stream``
    (torch.cuda.Stream) or ``__cuda_stream__()`` (cuda.core), or None (0: the legacy default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, Stream):
        return stream.handle
    if isinstance(stream, int) and not isinstance(stream, bool):
        if not 0 <= stream < 2**64:
            raise ValueError(f"stream handle must be >= 0 and below 2**64, got {stream}")
        return int(stream)
    if isinstance(stream, _cu.CUstream):
        return int(stream)
    handle = getattr(stream, "cuda_stream", None)
    if handle is None and hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    if isinstance(handle, int) and not isinstance(handle, bool):
        return handle
    raise TypeError("stream must be a pyrms Stream, a raw CUstream handle (int), an object with an "
                    "int .cuda_stream (torch.cuda.Stream) or __cuda_stream__(), or None; "
                    f"got {type(stream).__name__}")


def stream_device(handle: int) -> int:
    """The ordinal of the device whose context the stream ``handle`` (a raw CUstream other than the
    default streams 0, 1 and 2, which mean the current context's) was created in (cuStreamGetDevice);
    CudaError for a handle the driver does not know."""
    _ensure_init()
    # A CUdevice is its ordinal: cuDeviceGet(n) gives n.
    return int(check(_cu.cuStreamGetDevice(handle), "cuStreamGetDevice"))


def _stream_arg(stream):
    """``stream`` as cuda.bindings takes it, fastest for the common kinds."""
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    if type(stream) is Stream:
        return stream._live()
    return stream_handle(stream)


class Event(_Owned):
    """A CUDA event; ``timing=False`` makes recording cheaper but elapsed_ms impossible."""

    def __init__(self, timing: bool = True, device=None):
        device = resolve_device(device)
        flags = _cu.CUevent_flags.CU_EVENT_DEFAULT if timing else _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.timing = bool(timing)
        self._event = check(_cu.cuEventCreate(flags), "cuEventCreate")
        self._own(device, [(_cu.cuEventDestroy, self._event, "cuEventDestroy")])

    def _live(self):
        if self._closed:
            raise ValueError("event is closed")
        return self._event

    def record(self, stream=None) -> None:
        """Record on ``stream`` (see stream_handle; None: the legacy default stream)."""
        event = self._live()
        self.device.make_current()  # a NULL stream means the current context's: it must be the event's
        check(_cu.cuEventRecord(event, _stream_arg(stream)), "cuEventRecord")

    def synchronize(self) -> None:
        """Wait until the work before the last record() has finished."""
        check(_cu.cuEventSynchronize(self._live()), "cuEventSynchronize")

    def elapsed_ms(self, since: "Event") -> float:
        """Milliseconds from ``since`` to this event; both recorded, both with timing."""
        if not (self.timing and since.timing):
            raise ValueError("elapsed_ms needs two events created with timing=True")
        return float(check(_cu.cuEventElapsedTime(since._live(), self._live()), "cuEventElapsedTime"))


# ---------------------------------------------------------------------------------------------
# Memory


class DeviceBuffer(_Owned):
    """``nbytes`` of device memory (cuMemAlloc) in ``device``'s primary context."""

    def __init__(self, nbytes: int, device=None):
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

    def __init__(self, device=None, keep_bytes: int = 0):
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
            return int(check(_cu.cuMemAllocFromPoolAsync(nbytes, pool, _stream_arg(stream)), "cuMemAllocFromPoolAsync"))
        except errors.OutOfMemoryError as exc:
            raise _out_of_memory(exc, nbytes, self.device) from None

    def free(self, ptr: int, stream=None) -> None:
        """Return ``ptr`` (from ``allocate``) to the pool once the work queued on ``stream`` so far is done."""
        self._live()
        self.device.make_current()
        check(_cu.cuMemFreeAsync(ptr, _stream_arg(stream)), "cuMemFreeAsync")

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

    def __init__(self, nbytes: int, device=None):
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

    def numpy(self, dtype, count: int | None = None) -> np.ndarray:
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


def _host_array(array, name: str, writable: bool = False) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (shape {array.shape}, strides {array.strides}); "
                         "use np.ascontiguousarray")
    if writable and not array.flags.writeable:
        raise ValueError(f"{name} must be writeable")
    return array


def memcpy_htod(dst_ptr: int, src: np.ndarray, stream=None) -> None:
    """Copy all of ``src`` to device memory. stream=None: synchronous; else queued on ``stream``."""
    _host_array(src, "src")
    if src.nbytes == 0:
        return
    _ensure_context()
    if stream is None:
        check(_cu.cuMemcpyHtoD(dst_ptr, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")
    else:
        check(_cu.cuMemcpyHtoDAsync(dst_ptr, src.ctypes.data, src.nbytes, _stream_arg(stream)),
              "cuMemcpyHtoDAsync")


def memcpy_dtoh(dst: np.ndarray, src_ptr: int, stream=None) -> None:
    """Fill all of ``dst`` from device memory. stream=None: synchronous; else queued on ``stream``
    (the caller synchronizes before reading ``dst``)."""
    _host_array(dst, "dst", writable=True)
    if dst.nbytes == 0:
        return
    _ensure_context()
    if stream is None:
        check(_cu.cuMemcpyDtoH(dst.ctypes.data, src_ptr, dst.nbytes), "cuMemcpyDtoH")
    else:
        check(_cu.cuMemcpyDtoHAsync(dst.ctypes.data, src_ptr, dst.nbytes, _stream_arg(stream)),
              "cuMemcpyDtoHAsync")


def memcpy_dtod(dst_ptr: int, src_ptr: int, nbytes: int, stream=None) -> None:
    """Copy ``nbytes`` between device addresses. stream=None: returns when the copy is done."""
    if nbytes == 0:
        return
    _ensure_context()
    if stream is None:
        check(_cu.cuMemcpyDtoD(dst_ptr, src_ptr, nbytes), "cuMemcpyDtoD")
        # The driver runs device-to-device copies asynchronously even without a stream.
        check(_cu.cuStreamSynchronize(0), "cuStreamSynchronize")
    else:
        check(_cu.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, _stream_arg(stream)), "cuMemcpyDtoDAsync")


def memset_d8(ptr: int, byte: int, nbytes: int, stream=None) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``byte``. stream=None: returns when it is done."""
    if not 0 <= byte <= 255:
        raise ValueError(f"byte must be in 0..255, got {byte}")
    if nbytes == 0:
        return
    _ensure_context()
    if stream is None:
        check(_cu.cuMemsetD8(ptr, byte, nbytes), "cuMemsetD8")
        check(_cu.cuStreamSynchronize(0), "cuStreamSynchronize")  # memsets are asynchronous too
    else:
        check(_cu.cuMemsetD8Async(ptr, byte, nbytes, _stream_arg(stream)), "cuMemsetD8Async")


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device owning ``ptr``, or None if the driver does not know the address
    (pageable host memory, freed or invalid pointers)."""
    _ensure_context()
    result = _cu.cuPointerGetAttribute(_cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if result[0] == _cu.CUresult.CUDA_ERROR_INVALID_VALUE:
        return None
    return int(check(result, "cuPointerGetAttribute"))


# ---------------------------------------------------------------------------------------------
# Modules and launches (used by pyrms.launch)


def module_load(image: bytes, device: Device):
    """Load a CUBIN image into ``device``'s primary context; returns the CUmodule."""
    device.make_current()
    return check(_cu.cuModuleLoadData(image), "cuModuleLoadData")


def module_function(module, name: str, device: Device):
    """The CUfunction ``name`` of ``module``, or None if the module has no such function."""
    device.make_current()
    result = _cu.cuModuleGetFunction(module, name.encode())
    if result[0] == _cu.CUresult.CUDA_ERROR_NOT_FOUND:
        return None
    return check(result, "cuModuleGetFunction")


def set_max_dynamic_shared(function, nbytes: int, device: Device) -> None:
    """Allow ``function`` up to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
    device.make_current()
    attribute = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(_cu.cuFuncSetAttribute(function, attribute, nbytes), "cuFuncSetAttribute")


_PDL = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def pdl_config(bx: int = 1, by: int = 1, bz: int = 1, shared_bytes: int = 0):
    """A ``CUlaunchConfig`` for cuLaunchKernelEx that allows programmatic dependent launch (PDL):
    the launch may start while the kernel before it on the stream still runs, once that kernel has
    executed ``griddepcontrol.launch_dependents`` (or exited), and the launched kernel's
    ``griddepcontrol.wait`` waits for that kernel to complete and its writes to be visible. A kernel
    launched so must wait before it reads anything the previous kernel writes.

    The block and dynamic shared bytes are set here, the grid to 1 x 1 x 1 and the stream to NULL;
    the caller sets what changes per launch (``gridDimX``, ``hStream``: an int handle or a CUstream).
    cuLaunchKernelEx only reads the config, so one thread may reuse it launch after launch, but
    two threads must not share one that either changes."""
    attribute = _cu.CUlaunchAttribute()
    attribute.id = _PDL
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = _cu.CUlaunchConfig()
    config.attrs = [attribute]  # copied into an array the config owns
    config.numAttrs = 1  # setting attrs leaves numAttrs at 0, and the driver reads numAttrs entries
    config.gridDimX = config.gridDimY = config.gridDimZ = 1
    config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
    config.sharedMemBytes = shared_bytes
    return config


class _ThreadConfig(threading.local):
    """The calling thread's config for launch_kernel's PDL launches, made at its first one (the
    class default makes an unset one a plain read, as in _Selected)."""

    config = None


_thread_config = _ThreadConfig()


def raw_launch(pdl: bool = False):
    """The binding's launch call itself, for the one hot path that calls it directly
    (``pyrms.launch.RowLaunch``: a Python frame less per launch), which passes its result to
    ``check``; everything else launches through ``launch_kernel``. Without ``pdl``:
    ``cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address, 0)``;
    with it: ``cuLaunchKernelEx(config, function, params_address, 0)``, ``config`` from pdl_config."""
    return _cu.cuLaunchKernelEx if pdl else _cu.cuLaunchKernel


def launch_kernel(function, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                  shared_bytes: int, stream, params_address: int, pdl: bool = False) -> None:
    """cuLaunchKernel with a packed ``void*[]`` at ``params_address``; with ``pdl``, cuLaunchKernelEx
    with programmatic dependent launch allowed (see pdl_config). The caller makes the function's
    context current."""
    if type(stream) is not int:
        stream = _stream_arg(stream)
    if pdl:
        _launch_pdl(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address)
        return
    result = _cu.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address, 0)
    if result[0]:
        check(result, "cuLaunchKernel")


def _launch_pdl(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address) -> None:
    config = _thread_config.config
    if config is None:
        config = _thread_config.config = pdl_config()
    # Every field, since the thread's one config serves all its kernels.
    config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
    config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
    config.sharedMemBytes, config.hStream = shared_bytes, stream
    result = _cu.cuLaunchKernelEx(config, function, params_address, 0)
    if result[0]:
        check(result, "cuLaunchKernelEx")


# ---------------------------------------------------------------------------------------------
# Graphs


class Graph(_Owned):
    """Work captured from a stream (see ``capture``); ``launch()`` replays it."""

    def __init__(self, device: Device):
        self._graph = None
        self._exec = None
        self._lock = threading.Lock()
        self._own(device, [])

    def _captured(self, graph) -> None:
        self._graph = graph
        self._resources.append((_cu.cuGraphDestroy, graph, "cuGraphDestroy"))

    def launch(self, stream=None) -> None:
        """Replay the graph on ``stream`` (instantiated at the first launch)."""
        if self._closed:
            raise ValueError("graph is closed")
        if self._graph is None:
            raise ValueError("graph capture has not finished: launch after the capture block")
        self.device.make_current()
        if self._exec is None:
            with self._lock:
                if self._exec is None:
                    graph_exec = check(_cu.cuGraphInstantiate(self._graph, 0), "cuGraphInstantiate")
                    # An executable graph must be destroyed before the graph it came from.
                    self._resources.insert(0, (_cu.cuGraphExecDestroy, graph_exec, "cuGraphExecDestroy"))
                    self._exec = graph_exec
        check(_cu.cuGraphLaunch(self._exec, _stream_arg(stream)), "cuGraphLaunch")


@contextlib.contextmanager
def capture(stream) -> Iterator[Graph]:
    """Capture the work queued on ``stream`` inside the block into the yielded Graph.

    Thread-local capture mode: this thread may not make capture-unsafe calls (synchronous copies,
    cuMemAlloc) during the capture, while other threads are unaffected. The legacy default stream
    cannot be captured: use a pyrms Stream.
    """
    handle = stream_handle(stream)
    if handle in _LEGACY_STREAMS:
        raise ValueError(f"cannot capture the legacy default stream (handle {handle}); "
                         "capture on a pyrms Stream or another non-default stream")
    device = stream.device if isinstance(stream, Stream) and stream.device is not None else current_device()
    graph = Graph(device)
    mode = _cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    check(_cu.cuStreamBeginCapture(handle, mode), "cuStreamBeginCapture")
    try:
        yield graph
    except BaseException:
        # End the capture so the stream is usable again; the partial graph is discarded, and an
        # error ending it (an invalidated capture) must not hide the exception that got us here.
        with contextlib.suppress(Exception):
            partial = check(_cu.cuStreamEndCapture(handle), "cuStreamEndCapture")
            if int(partial):
                check(_cu.cuGraphDestroy(partial), "cuGraphDestroy")
        graph.close()
        raise
    graph._captured(check(_cu.cuStreamEndCapture(handle), "cuStreamEndCapture"))

"""One CUDA device: its attributes (asked once), its primary context, the one the CUDA runtime uses,
so that memory is shared with PyTorch, CuPy and anything else built on the runtime API, and the state
every layer keeps for it. Primary contexts are retained once and never released: the driver tears
them down at process exit."""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Iterator

from cuda.bindings import driver as _cu

from ..errors import check


class Device:
    """One CUDA device, its primary context and everything pyrms keeps for it. Get it from
    ``get_device`` or ``current_device``.

    The per-device state of every layer lives here, in containers the layers above fill (the driver
    never looks inside), so that dropping the Device drops it all: tests/support/fake_driver.py resets the
    process by replacing _process's table of Devices. ``modules``: sha256 of a CUBIN -> its
    pyrms.launch.Module (kernels, argument packs); ``kernels``: (source, name expression) -> Kernel
    (pyrms.launch.get_kernel); ``prepared``: (op's PreparedCache, static arguments...) -> prepared launch
    (pyrms.ops._prepared); ``workspace``: the backward's MemoryPool, made at first use
    (pyrms.ops._workspace). Each layer guards its writes with its own lock."""

    def __init__(self, ordinal: int, handle):
        self.ordinal = ordinal
        self._handle = handle
        self._context = None
        self._lock = threading.Lock()
        self.modules: dict = {}
        self.kernels: dict = {}
        self.prepared: dict = {}
        self.workspace = None

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
    def max_shared_memory_per_multiprocessor(self) -> int:
        """Shared memory of one multiprocessor, which the blocks resident on it share."""
        return self._attribute(_cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)

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

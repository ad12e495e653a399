"""One stand-in for cuda.bindings.driver on the CPU, for the driver tests (tests/driver/test_driver.py)
and the hostile-input cases that need a device (tests/support/hostile_cases.py).

Each module of the pyrms.driver package reaches the driver only through its global ``_cu``, so a
stand-in that keeps cuda.bindings' calling conventions ((status, *values) tuples, the real handle and
enum types), swapped into every one of them, runs every code path of the driver layer without a GPU."""
import ctypes
import sys
import threading
import time
from dataclasses import dataclass

from cuda.bindings import driver as real_cu

OK = real_cu.CUresult.CUDA_SUCCESS
PDL = real_cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def run_threads_switching_often(worker, count: int) -> None:
    """Run worker(0) .. worker(count - 1) in as many threads at once, the interpreter switching between
    them every microsecond, so that state two threads wrongly share is caught mid-launch."""
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)


def read_params(signature, address: int) -> list:
    """Follow the void* array at ``address`` as cuLaunchKernel does, reading each slot by its kind."""
    pointers = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))
    kinds = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
             "u32": ctypes.c_uint32, "f32": ctypes.c_float}
    return [kinds[kind].from_address(pointers[i]).value for i, kind in enumerate(signature)]


@dataclass(frozen=True)
class Launch:
    """One launch the fake accepted, as the GPU would have run it: the kernel's name, the call's
    shape, the stream, the context it ran in, the arguments read as the kernel's kinds (None where
    the fake was not told them: FakeDriver.kernel_params) and whether PDL was allowed."""

    kernel: str
    grid: tuple
    block: tuple
    shared: int
    stream: int
    context: int
    args: tuple | None
    pdl: bool


class FakeDriver:
    """cuda.bindings.driver on the CPU: sm_90 devices ("Fake H200", one by default; ``device_count`` more, each
    with its primary context 0xC000 + ordinal) whose memory is host memory, so
    copies and memsets really move bytes (and accesses outside every allocation fail the test);
    streams, events, modules, graphs and memory pools as numbered handles that must be alive when
    destroyed; every call's name and arguments logged in ``calls``. Statuses, handle types and enums
    are the real ones, and so are the argument conversions that matter: a size of 2**64 or more does
    not fit cuMemAlloc's size_t (OverflowError, as in cuda.bindings). Free memory counts the device
    allocations; memory-pool frees take effect at once (no work runs). Libraries and modules have a
    kernel of every name (only those in ``functions`` where it is a set). A module's function, and a
    library kernel's function (cuKernelGetFunction), belongs to the context current when it was made:
    launching it from another context fails with CUDA_ERROR_INVALID_CONTEXT, as on a GPU; a library's
    CUkernel runs in the stream's context (the current one on a default stream), as on a GPU.
    Allocations and streams belong to the device of the context current when they were made (pool
    allocations to the pool's), which cuPointerGetAttribute and cuStreamGetDevice report. Launches
    (cuLaunchKernel and cuLaunchKernelEx) read their arguments as ``kernel_params`` says for the
    kernel's name (``param_kinds`` for the others, in ``calls``), return the statuses queued in
    ``launch_failures`` first, and record each accepted one in ``launches`` (a kernel that does nothing,
    its launch checked)."""

    cuuint64_t = real_cu.cuuint64_t  # a value type, not a call

    def __init__(self, free_bytes=1 << 24, total_bytes=1 << 25, device_count=1):
        self.device_count = device_count
        self.total = total_bytes
        self.free = free_bytes
        self.device_blocks = set()  # addresses of device (not pinned host) allocations
        self.pools = {}  # pool handle -> addresses allocated from it
        self.calls = []
        self.blocks = {}  # address -> ctypes buffer standing for device (or pinned) memory
        self.threads = threading.local()
        self.next_handle = 0x100
        self.live = set()
        self.contexts = {}  # module or function handle -> the context it was loaded in
        self.functions = None  # the kernel names every library and module has: None for any
        self.kernel_names = {}  # CUkernel or CUfunction handle -> its kernel's name (str)
        self.kernel_params = {}  # kernel name -> the argument kinds its launches are read as
        # shared memory a block may opt into and a multiprocessor has: an H200's (a test may set a smaller GPU's)
        self.shared_optin, self.shared_per_sm = 232448, 233472
        self.launches = []  # Launch records of the launches accepted
        self.owners = {}  # allocation address, stream or pool handle -> the ordinal of its device
        self.lock = threading.RLock()  # handles and allocation tables, for threads that allocate at once
        self.param_kinds = ("ptr", "i32")
        self.launch_failures = []  # statuses the next launches return, first one first

    def __getattr__(self, name):  # enums, handle types and constants come from the real module
        if name.startswith("cu"):
            raise AttributeError(f"FakeDriver has no {name}")
        return getattr(real_cu, name)

    def _log(self, name, *args):
        self.calls.append((name, args))

    def _handle(self, kind):
        with self.lock:
            self.next_handle += 0x10
            self.live.add(self.next_handle)
            return kind(self.next_handle)

    def _destroy(self, name, handle):
        self._log(name, int(handle))
        if int(handle) not in self.live:
            return (real_cu.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.live.remove(int(handle))
        return (OK,)

    def _stack(self):
        if not hasattr(self.threads, "stack"):
            self.threads.stack = []
        return self.threads.stack

    def _check_range(self, address, nbytes):
        with self.lock:
            blocks = list(self.blocks.items())
        for start, block in blocks:
            if start <= address and address + nbytes <= start + len(block):
                return True
        raise AssertionError(f"access to [{address:#x}, +{nbytes}) outside every allocation")

    def cuInit(self, flags):
        return (OK,)

    def cuDriverGetVersion(self):
        return (OK, 13000)

    def cuDeviceGetCount(self):
        return (OK, self.device_count)

    def cuDeviceGet(self, ordinal):
        return (OK, real_cu.CUdevice(ordinal))

    def cuDeviceGetName(self, length, dev):
        return (OK, b"Fake H200\0".ljust(length, b"\0"))

    def cuDeviceGetAttribute(self, attribute, dev):
        a = real_cu.CUdevice_attribute
        values = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9, a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                  a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132, a.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 50 << 20,
                  a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
                  a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: self.shared_optin,
                  a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: self.shared_per_sm}
        return (OK, values.get(attribute, 1024))

    def cuDeviceTotalMem(self, dev):
        return (OK, self.total)

    def cuMemGetInfo(self):
        with self.lock:
            return (OK, self.free - sum(len(self.blocks[p]) for p in self.device_blocks), self.total)

    def cuDevicePrimaryCtxRetain(self, dev):
        self._log("cuDevicePrimaryCtxRetain", int(dev))
        return (OK, real_cu.CUcontext(0xC000 + int(dev)))

    def cuCtxGetCurrent(self):
        stack = self._stack()
        return (OK, real_cu.CUcontext(stack[-1] if stack else 0))

    def cuCtxSetCurrent(self, ctx):
        self._log("cuCtxSetCurrent", int(ctx))
        stack = self._stack()
        if stack:
            stack[-1] = int(ctx)
        else:
            stack.append(int(ctx))
        return (OK,)

    def cuCtxPushCurrent(self, ctx):
        self._stack().append(int(ctx))
        return (OK,)

    def cuCtxPopCurrent(self):
        return (OK, real_cu.CUcontext(self._stack().pop()))

    def cuCtxSynchronize(self):
        return (OK,)

    def _current_device(self):
        context = self._current()
        return context - 0xC000 if 0xC000 <= context < 0xC000 + self.device_count else 0

    def cuStreamCreate(self, flags):
        stream = self._handle(real_cu.CUstream)
        self.owners[int(stream)] = self._current_device()
        return (OK, stream)

    def cuStreamGetDevice(self, stream):
        self._log("cuStreamGetDevice", int(stream))
        if int(stream) not in self.live:
            return (real_cu.CUresult.CUDA_ERROR_INVALID_HANDLE, None)
        return (OK, real_cu.CUdevice(self.owners[int(stream)]))

    def cuStreamDestroy(self, stream):
        return self._destroy("cuStreamDestroy", stream)

    def cuStreamSynchronize(self, stream):
        return (OK,)

    def cuEventCreate(self, flags):
        return (OK, self._handle(real_cu.CUevent))

    def cuEventRecord(self, event, stream):
        self._log("cuEventRecord", int(event), int(stream))
        return (OK,)

    def cuEventSynchronize(self, event):
        return (OK,)

    def cuEventElapsedTime(self, start, end):
        return (OK, 0.25)

    def cuEventDestroy(self, event):
        return self._destroy("cuEventDestroy", event)

    def _allocate(self, nbytes, device=None):
        block = (ctypes.c_char * nbytes)()
        with self.lock:
            self.blocks[ctypes.addressof(block)] = block
            self.live.add(ctypes.addressof(block))
            self.owners[ctypes.addressof(block)] = self._current_device() if device is None else device
        return ctypes.addressof(block)

    def cuMemAlloc(self, nbytes, device=None):
        if not 0 <= nbytes < 2**64:
            raise OverflowError("Python int too large to convert to C unsigned long")  # cuda.bindings' size_t
        if nbytes > self.cuMemGetInfo()[1]:
            return (real_cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, real_cu.CUdeviceptr(0))
        ptr = self._allocate(nbytes, device)
        with self.lock:
            self.device_blocks.add(ptr)
        return (OK, real_cu.CUdeviceptr(ptr))

    def cuMemFree(self, ptr):
        with self.lock:
            self.blocks.pop(int(ptr), None)
            self.device_blocks.discard(int(ptr))
            return self._destroy("cuMemFree", ptr)

    def cuMemPoolCreate(self, props):
        pool = self._handle(real_cu.CUmemoryPool)
        with self.lock:
            self.pools[int(pool)] = set()
            self.owners[int(pool)] = props.location.id
        return (OK, pool)

    def cuMemPoolDestroy(self, pool):
        for ptr in self.pools.pop(int(pool), ()):
            self.cuMemFree(ptr)
        return self._destroy("cuMemPoolDestroy", pool)

    def cuMemPoolSetAttribute(self, pool, attribute, value):
        self._log("cuMemPoolSetAttribute", int(pool), attribute, int(value))
        return (OK,)

    def cuMemPoolGetAttribute(self, pool, attribute):  # reserved = used: nothing is kept for reuse
        return (OK, real_cu.cuuint64_t(sum(len(self.blocks[p]) for p in self.pools[int(pool)])))

    def cuMemPoolTrimTo(self, pool, keep):
        self._log("cuMemPoolTrimTo", int(pool), keep)
        return (OK,)

    def cuMemAllocFromPoolAsync(self, nbytes, pool, stream):
        self._log("cuMemAllocFromPoolAsync", nbytes, int(pool), int(stream))
        status, ptr = self.cuMemAlloc(nbytes, self.owners[int(pool)])
        if status == OK:
            with self.lock:
                self.pools[int(pool)].add(int(ptr))
        return (status, ptr)

    def cuMemFreeAsync(self, ptr, stream):
        self._log("cuMemFreeAsync", int(ptr), int(stream))
        with self.lock:
            for owned in self.pools.values():
                owned.discard(int(ptr))
            return self.cuMemFree(ptr)

    def cuMemHostAlloc(self, nbytes, flags):
        return (OK, self._allocate(nbytes))

    def cuMemFreeHost(self, ptr):
        self.blocks.pop(int(ptr), None)
        return self._destroy("cuMemFreeHost", ptr)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        self._check_range(int(dst), nbytes)
        ctypes.memmove(int(dst), src, nbytes)
        return (OK,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self._check_range(int(src), nbytes)
        ctypes.memmove(dst, int(src), nbytes)
        return (OK,)

    def cuMemcpyDtoD(self, dst, src, nbytes):
        self._check_range(int(dst), nbytes)
        self._check_range(int(src), nbytes)
        ctypes.memmove(int(dst), int(src), nbytes)
        return (OK,)

    def cuMemsetD8(self, ptr, byte, nbytes):
        self._check_range(int(ptr), nbytes)
        ctypes.memset(int(ptr), byte, nbytes)
        return (OK,)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyHtoD(dst, src, nbytes)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyDtoH(dst, src, nbytes)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyDtoD(dst, src, nbytes)

    def cuMemsetD8Async(self, ptr, byte, nbytes, stream):
        self._log("cuMemsetD8Async", int(ptr), byte, nbytes, int(stream))
        return self.cuMemsetD8(ptr, byte, nbytes)

    def cuPointerGetAttribute(self, attribute, ptr):
        self._log("cuPointerGetAttribute", int(ptr))
        with self.lock:
            blocks = list(self.blocks.items())
        for start, block in blocks:
            if start <= int(ptr) < start + len(block):
                return (OK, self.owners[start])
        return (real_cu.CUresult.CUDA_ERROR_INVALID_VALUE, None)

    def _current(self):
        return self._stack()[-1] if self._stack() else 0

    def cuLibraryLoadData(self, code, jit_options, jit_values, jit_count, options, option_values, option_count):
        self._log("cuLibraryLoadData", bytes(code))
        return (OK, self._handle(real_cu.CUlibrary))

    def cuLibraryGetKernel(self, library, name):
        if int(library) not in self.live:
            return (real_cu.CUresult.CUDA_ERROR_INVALID_HANDLE, None)
        if self.functions is not None and name not in self.functions:
            return (real_cu.CUresult.CUDA_ERROR_NOT_FOUND, None)
        kernel = self._handle(real_cu.CUkernel)
        self.kernel_names[int(kernel)] = name.decode()
        return (OK, kernel)

    def cuKernelGetFunction(self, kernel):
        self._log("cuKernelGetFunction", int(kernel), self._current())
        if not self._current():
            return (real_cu.CUresult.CUDA_ERROR_INVALID_CONTEXT, None)
        function = self._handle(real_cu.CUfunction)
        self.contexts[int(function)] = self._current()
        self.kernel_names[int(function)] = self.kernel_names[int(kernel)]
        return (OK, function)

    def cuKernelSetAttribute(self, attribute, value, kernel, dev):
        self._log("cuKernelSetAttribute", attribute, value, int(kernel), int(dev))
        return (OK,)

    def cuFuncSetAttribute(self, function, attribute, value):
        self._log("cuFuncSetAttribute", int(function), attribute, value)
        return (OK,)

    def _launch(self, name, f, grid, block, shared, stream, params, pdl=None):
        """Log one launch attempt (the context it runs in included) and return its status; record an
        accepted one in ``launches``."""
        current, stream = self._current(), int(stream)
        kernel = self.kernel_names.get(int(f), "")
        kinds = self.kernel_params.get(kernel)
        args = tuple(read_params(kinds if kinds is not None else self.param_kinds, params))
        runs_in = current  # a CUfunction's launch, or any on a default stream: the current context
        if isinstance(f, real_cu.CUkernel) and stream > 2 and stream in self.owners:
            runs_in = 0xC000 + self.owners[stream]  # a CUkernel on a stream runs in the stream's context
        self._log(name, int(f), grid, block, shared, stream, runs_in, args, *(() if pdl is None else (pdl,)))
        if self.launch_failures:
            return (self.launch_failures.pop(0),)
        if self.contexts.get(int(f), runs_in) != runs_in:  # a function runs in its own context only
            return (real_cu.CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        self.launches.append(Launch(kernel, grid, block, shared, stream, runs_in, args if kinds is not None else None,
                                    bool(pdl)))
        return (OK,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return self._launch("cuLaunchKernel", f, (gx, gy, gz), (bx, by, bz), shared, stream, params)

    def cuLaunchKernelEx(self, config, f, params, extra):
        """Logged as cuLaunchKernel is, plus whether the attributes the driver reads (the first
        ``numAttrs``) allow programmatic stream serialization. It lets other threads run before it
        reads the config, so that a config shared between threads shows in their launches."""
        time.sleep(0)
        pdl = any(a.id == PDL and a.value.programmaticStreamSerializationAllowed
                  for a in config.attrs[:config.numAttrs])
        return self._launch("cuLaunchKernelEx", f, (config.gridDimX, config.gridDimY, config.gridDimZ),
                            (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes,
                            config.hStream, params, pdl)

    def cuStreamBeginCapture(self, stream, mode):
        self._log("cuStreamBeginCapture", int(stream), mode)
        return (OK,)

    def cuStreamEndCapture(self, stream):
        self._log("cuStreamEndCapture", int(stream))
        return (OK, self._handle(real_cu.CUgraph))

    def cuGraphInstantiate(self, graph, flags):
        self._log("cuGraphInstantiate", int(graph))
        return (OK, self._handle(real_cu.CUgraphExec))

    def cuGraphLaunch(self, graph_exec, stream):
        self._log("cuGraphLaunch", int(graph_exec), int(stream))
        return (OK,)

    def cuGraphExecDestroy(self, graph_exec):
        return self._destroy("cuGraphExecDestroy", graph_exec)

    def cuGraphDestroy(self, graph):
        return self._destroy("cuGraphDestroy", graph)

    def cuGetErrorName(self, status):
        return (OK, status.name.encode())

    def cuGetErrorString(self, status):
        return (OK, b"out of memory" if "MEMORY" in status.name else b"fake description")

    def names(self):
        return [name for name, _ in self.calls]


def driver_modules() -> list:
    """The modules of the pyrms.driver package that call the driver (those with a global ``_cu``),
    found by walking the package, so that a new module cannot be missed by fresh_driver_state."""
    import importlib
    import pkgutil

    from pyrms import driver

    modules = [importlib.import_module(f"{driver.__name__}.{info.name}") for info in pkgutil.iter_modules(driver.__path__)]
    return [module for module in modules if hasattr(module, "_cu")]


def fresh_driver_state(set_attr, cu) -> None:
    """Point pyrms's driver layer at ``cu`` (a FakeDriver, or any stand-in for cuda.bindings.driver)
    with nothing cached from before: no device, context, module, kernel, prepared launch, workspace
    pool, or pointer and stream accepted for a device. ``set_attr(obj, name, value)`` does the
    replacing, so the caller decides how it is undone (``monkeypatch.setattr`` in a fixture,
    hostile_cases' saved-attribute list).

    All of it hangs off one object, ``pyrms.driver._process._state`` (each Device holding its own
    device's), replaced here. The thread-local device selection is one object for the life of the
    process (the hot path reads it through the package), so it is reset for the calling thread;
    threads started later begin with none selected."""
    from pyrms.driver import _process

    for module in driver_modules():
        set_attr(module, "_cu", cu)
    set_attr(_process, "_state", _process._Process())
    set_attr(_process._selected, "device", None)

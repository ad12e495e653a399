"""The launch layer over pyrms.driver: kernels compiled and loaded once per device (``get_kernel``), CUBIN
images loaded once per device, kernels looked up once per name, arguments packed into buffers built once
per signature, and the launch itself.

What this layer keeps lives in the state objects of pyrms.driver (``Device.modules``, the process's
``contexts``), so that nothing here outlives a reset of the driver's state.

This is on the hot path of every op, so a launch does no allocation beyond the few Python objects
the cuda.bindings call itself needs: the argument values are written with one ``struct.pack_into``
(which also range-checks them) into slots whose addresses were laid out when the pack was built.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import operator
import struct
import threading
from threading import get_ident
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from . import compiler, driver, errors

# struct format of one argument's 8-byte slot, and what the kind accepts (for error messages).
ARG_KINDS = {
    "ptr": ("Q", "a device pointer: an int in [0, 2**64)"),
    "i32": ("i4x", "an int in [-2**31, 2**31)"),
    "i64": ("q", "an int in [-2**63, 2**63)"),
    "u32": ("I4x", "an int in [0, 2**32)"),
    "f32": ("f4x", "a float within float32 range"),
}
_SLOT_BYTES = 8
# Errors a launch gets when another context than the kernel's is current on the thread.
_WRONG_CONTEXT = frozenset({"CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_CONTEXT_IS_DESTROYED"})
# Launches that run in the current context (a CUfunction's, or any kernel's on a default stream, which
# names the current context's stream) trust the process's ``contexts``: the Device whose context each
# thread (by threading.get_ident) last made current for a launch. Trusting it saves a cuCtxGetCurrent
# per launch; if another library switched contexts since, the launch of the context's CUfunction
# fails without side effects and is retried after a real make_current. (A CUkernel would not fail:
# it would run in the other device's context, so these launches never pass one.) A dict keyed by the
# thread's ident is a quarter of the cost of a threading.local attribute on the hot path; the ident
# of a thread that ended may come back for a new thread, which then starts from the stale entry's
# device, which a failed launch corrects as above. A CUkernel on an explicit stream runs in the
# stream's context: nothing is made current for it.
_PER_THREAD_MAX = 4096  # entries kept, whatever threads come and go
# Threads inside binding() (pyrms.bind), by threading.get_ident: the launches their call would make, recorded
# instead of made. Empty but while a thread binds, so that a launch pays one test of an empty dict for it.
_binding: dict[int, list] = {}


class KernelNotFoundError(errors.PyrmsError, KeyError):
    """A module has no kernel of the requested (lowered) name."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0])


def check_signature(signature) -> tuple[str, ...]:
    """A signature as a tuple of argument kinds; ValueError names an unknown kind."""
    if isinstance(signature, str):
        raise TypeError(f"signature must be a sequence of argument kinds, not the string {signature!r}")
    signature = tuple(signature)
    for position, kind in enumerate(signature):
        if kind not in ARG_KINDS:
            raise ValueError(f"argument {position} has kind {kind!r}; allowed: {', '.join(ARG_KINDS)}")
    return signature


class ArgPack:
    """Argument slots for one signature, built once and refilled for every launch.

    Argument i lives in bytes [8i, 8i+8) of one buffer; a ``void*`` array holds the slots'
    addresses, and its address is what cuLaunchKernel's ``kernelParams`` receives. cuLaunchKernel
    copies the values before it returns, so a pack can be refilled right after, but two threads
    must not share one: Kernel keeps one per thread.
    """

    __slots__ = ("signature", "name", "address", "_struct", "_pack_into", "_buffer", "_slots", "_pointers")

    def __init__(self, signature, name: str = "kernel"):
        self.signature = check_signature(signature)
        self.name = name
        count = len(self.signature)
        self._struct = struct.Struct("<" + "".join(ARG_KINDS[kind][0] for kind in self.signature))
        self._pack_into = self._struct.pack_into
        self._buffer = bytearray(_SLOT_BYTES * max(count, 1))
        # A ctypes view of the bytearray pins its memory (it can no longer be resized) and gives its address.
        self._slots = (ctypes.c_char * len(self._buffer)).from_buffer(self._buffer)
        base = ctypes.addressof(self._slots)
        self._pointers = (ctypes.c_void_p * max(count, 1))(*(base + _SLOT_BYTES * i for i in range(count)))
        self.address = ctypes.addressof(self._pointers)

    def pack(self, args) -> int:
        """Write ``args`` into the slots; returns the ``kernelParams`` address."""
        try:
            self._pack_into(self._buffer, 0, *args)
        except (struct.error, TypeError, OverflowError):
            raise self._explain(args) from None
        return self.address

    def values(self) -> tuple:
        """The values now in the slots, as the kernel will read them."""
        return self._struct.unpack_from(self._buffer)

    def _explain(self, args) -> Exception:
        """The exception for arguments that did not pack, naming the culprit (error path only)."""
        try:
            args = list(args)
        except TypeError:
            return TypeError(f"{self.name}: args must be a sequence, got {type(args).__name__}")
        if len(args) != len(self.signature):
            return TypeError(f"{self.name} takes {len(self.signature)} arguments {self.signature}, "
                             f"got {len(args)}")
        for position, (kind, value) in enumerate(zip(self.signature, args)):
            fmt, allowed = ARG_KINDS[kind]
            try:
                struct.pack("<" + fmt, value)
            except (struct.error, TypeError, OverflowError):
                number = hasattr(value, "__float__" if kind == "f32" else "__index__")
                cls = ValueError if number else TypeError  # a number out of range, or not a number
                return cls(f"{self.name}: argument {position} ({kind}) must be {allowed}, got {value!r}")
        return TypeError(f"{self.name}: arguments {args!r} do not match the signature {self.signature}")


def _dims(value, what: str) -> tuple[int, int, int]:
    """A grid or block given as an int or a 1-3 tuple, as three positive ints."""
    try:
        dims = (operator.index(value),) if not isinstance(value, (tuple, list)) else tuple(
            operator.index(v) for v in value)
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or min(dims) < 1 or isinstance(value, bool):
        raise ValueError(f"{what} must be a positive int or a tuple of 1 to 3 positive ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))


class Kernel:
    """A kernel ready to launch: its handles, its name and its argument signature.

    ``handle`` is a CUkernel (an image loaded as a library: it launches in any context) with
    ``function`` its CUfunction in ``device``'s primary context, or a CUfunction with ``function``
    None. ``device`` is the device whose primary context runs ``function`` (made current before such
    a launch); None leaves the current context as it is. ``any_context``: ``handle`` is a CUkernel.
    """

    __slots__ = ("handle", "function", "any_context", "name", "signature", "device", "_packs", "_contexts")

    def __init__(self, handle, name: str, signature, device: driver.Device | None = None, function=None):
        self.handle = handle
        self.function = handle if function is None else function
        self.any_context = function is not None
        self.name = name
        self.signature = check_signature(signature)
        self.device = device
        self._packs = threading.local()
        self._contexts = driver.process_state().contexts

    def __repr__(self) -> str:
        return f"<pyrms Kernel {self.name} {self.signature}>"

    def launch(self, grid, block, args, stream=None, shared_bytes: int = 0, pdl: bool = False) -> None:
        """Queue one launch on ``stream`` (a pyrms Stream, a raw handle, an object with
        ``.cuda_stream``, or None for the legacy default stream). ``grid``/``block``: an int or a
        1-3 tuple. ``args``: a sequence matching the signature. ``pdl``: launch with programmatic
        dependent launch allowed (driver.pdl_config says what the kernel must then do). It launches
        ``function`` in the device's context, whatever the stream (the general path: RowLaunch is
        the one that passes a CUkernel)."""
        if type(grid) is int and grid > 0:
            gx, gy, gz = grid, 1, 1
        else:
            gx, gy, gz = _dims(grid, "grid")
        if type(block) is int and block > 0:
            bx, by, bz = block, 1, 1
        else:
            bx, by, bz = _dims(block, "block")
        if _binding and get_ident() in _binding:
            _binding[get_ident()].append(Recorded(self, False, (gx, gy, gz), (bx, by, bz), shared_bytes, stream,
                                                  tuple(args), bool(pdl), self.device))
            return
        try:
            pack = self._packs.pack
        except AttributeError:
            pack = self._packs.pack = ArgPack(self.signature, self.name)
        try:  # ArgPack.pack, inlined: this is the hot path
            pack._pack_into(pack._buffer, 0, *args)
        except (struct.error, TypeError, OverflowError):
            raise pack._explain(args) from None
        device = self.device
        if device is not None and self._contexts.get(get_ident()) is not device:
            _make_current(device, self._contexts)
        try:
            driver.launch_kernel(self.function, gx, gy, gz, bx, by, bz, shared_bytes, stream, pack.address, pdl)
        except errors.CudaError as exc:
            if device is None or exc.name not in _WRONG_CONTEXT:
                raise
            _make_current(device, self._contexts)
            driver.launch_kernel(self.function, gx, gy, gz, bx, by, bz, shared_bytes, stream, pack.address, pdl)

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
        device = self.device if self.device is not None else driver.current_device()
        driver.set_max_dynamic_shared(self.handle, self.function, nbytes, device)


def _make_current(device: driver.Device, contexts: dict) -> None:
    device.make_current()
    if len(contexts) >= _PER_THREAD_MAX:
        contexts.clear()
    contexts[get_ident()] = device


class _RowPack(ArgPack):
    """A thread's state in one RowLaunch: its arguments and, for PDL, its launch configuration and
    the grid and stream last set in it (one object, so that they cannot part when the per-thread dict is cleared)."""

    __slots__ = ("config", "grid", "stream")


class RowLaunch:
    """The launches of a prepared op: a 1-D grid, ``block`` threads, and a signature whose trailing
    arguments keep the values ``tail`` for every launch. Each thread's argument pack gets the tail
    once; a call packs only the leading arguments and calls cuLaunchKernel directly, so that a
    launch costs little more than the binding's own call.

    ``pdl``: every launch through cuLaunchKernelEx with programmatic dependent launch allowed
    (driver.pdl_config says what the kernel must then do). Each thread's launch configuration is
    built once, with the block and shared bytes; a call sets only the grid and the stream."""

    __slots__ = ("signature", "block", "shared_bytes", "tail", "device", "pdl", "_head", "_packs", "_launch",
                 "_contexts")

    def __init__(self, signature, block: int, tail: tuple, device: driver.Device, shared_bytes: int = 0,
                 pdl: bool = False):
        self.signature = check_signature(signature)
        self.block, self.tail, self.device, self.shared_bytes = block, tuple(tail), device, shared_bytes
        self.pdl = bool(pdl)
        head = self.signature[:len(self.signature) - len(self.tail)]
        self._head = struct.Struct("<" + "".join(ARG_KINDS[kind][0] for kind in head)).pack_into
        self._packs: dict[int, _RowPack] = {}
        self._launch = driver.raw_launch(self.pdl)
        self._contexts = driver.process_state().contexts

    def __call__(self, kernel: "Kernel", grid: int, stream: int, *head) -> None:
        """Launch ``kernel`` (of this signature, on this device) on ``grid`` blocks with the leading
        arguments ``head``; ``stream`` a raw handle. Errors are raised as from Kernel.launch. A CUkernel
        on an explicit stream launches as it is (the stream's context runs it); anything else launches
        the kernel's function in this device's context, made current first where this thread's last
        launch did not."""
        ident = get_ident()
        if _binding and ident in _binding:
            _binding[ident].append(Recorded(kernel, kernel.any_context, (grid, 1, 1), (self.block, 1, 1),
                                            self.shared_bytes, stream, (*head, *self.tail), self.pdl, self.device))
            return
        pack = self._packs.get(ident)
        if pack is None:
            pack = self._new_pack(ident)
        try:
            self._head(pack._buffer, 0, *head)
        except (struct.error, TypeError, OverflowError):
            raise pack._explain((*head, *self.tail)) from None
        if stream > 2 and kernel.any_context:  # 0, 1, 2 (NULL, legacy, per-thread): the current context's streams
            handle = kernel.handle
        else:
            if self._contexts.get(ident) is not self.device:
                _make_current(self.device, self._contexts)
            handle = kernel.function
        config = pack.config
        if config is None:
            result = self._launch(handle, grid, 1, 1, self.block, 1, 1, self.shared_bytes, stream, pack.address, 0)
        else:
            if grid != pack.grid:  # set only when it changes, as the stream: a model repeats row counts
                config.gridDimX = pack.grid = grid
            if stream != pack.stream:  # the setter converts the int to a CUstream: 100 ns saved per call
                config.hStream = pack.stream = stream
            result = self._launch(config, handle, pack.address, 0)
        if result[0]:
            self._failed(kernel, handle, grid, stream, pack, result)

    def _new_pack(self, ident: int) -> _RowPack:
        pack = _RowPack(self.signature, "prepared launch")
        pack.config = driver.pdl_config(self.block, 1, 1, self.shared_bytes) if self.pdl else None
        pack.grid = pack.stream = None
        pack.pack((*(0 for _ in range(len(self.signature) - len(self.tail))), *self.tail))
        if len(self._packs) >= _PER_THREAD_MAX:
            self._packs.clear()
        self._packs[ident] = pack
        return pack

    def _failed(self, kernel, handle, grid, stream, pack, result) -> None:
        """A launch error: a launch of the context's function retried once after making the context
        current if another library had switched it (as in Kernel.launch), raised otherwise."""
        try:
            errors.check(result, "cuLaunchKernelEx" if self.pdl else "cuLaunchKernel")
        except errors.CudaError as exc:
            if exc.name not in _WRONG_CONTEXT or handle is not kernel.function:
                raise
        _make_current(self.device, self._contexts)
        driver.launch_kernel(kernel.function, grid, 1, 1, self.block, 1, 1, self.shared_bytes, stream, pack.address,
                             self.pdl)


class Recorded(NamedTuple):
    """A launch recorded inside binding() instead of made: the kernel, whether its CUkernel may run on an
    explicit stream (``Kernel.any_context``, as RowLaunch passes it), the grid and block (three ints each), the
    dynamic shared bytes, the stream as given, the arguments, PDL, and the device whose context runs the
    kernel's function (None: the current one)."""

    kernel: Kernel
    any_context: bool
    grid: tuple
    block: tuple
    shared_bytes: int
    stream: Any
    args: tuple
    pdl: bool
    device: "driver.Device | None"


@contextlib.contextmanager
def binding() -> Iterator[list]:
    """Inside the block, the calling thread's launches (Kernel.launch, RowLaunch) are recorded in the list it
    yields (as Recorded) instead of made; other threads launch as usual."""
    ident = get_ident()
    if ident in _binding:
        raise RuntimeError("pyrms.bind: a call being bound cannot bind another")
    made = _binding[ident] = []
    try:
        yield made
    finally:
        del _binding[ident]


def binding_now() -> bool:
    """Whether the calling thread is inside binding() (what allocates per call refuses to be bound)."""
    return get_ident() in _binding


class BoundLaunch:
    """Launches bound to their arguments (``pyrms.bind`` makes them): packed once, each with its complete
    launch configuration, so that a call is one cuLaunchKernelEx per launch and nothing else.

    ``bound()`` launches on the stream the launches were recorded with; ``bound(stream)`` on another (a raw
    handle, a pyrms Stream, or anything with ``__cuda_stream__``/``.cuda_stream``), whose configurations are
    built once and kept (``check_stream(stream)`` first refuses a stream of another device). Launch errors
    are raised as from Kernel.launch: a kernel's function whose context is not current on the calling thread
    (another thread, another library's context) is retried once after making its device's context current,
    anything else raises CudaError. ``result``: what the bound call returned (its output, say); ``operands``:
    what it was given (kept alive with it)."""

    __slots__ = ("result", "operands", "recorded", "_launch", "_plan", "_packs", "_streams", "_check_stream",
                 "_contexts", "__weakref__")

    _STREAMS_MAX = 64  # other streams' configurations kept, whatever streams a caller passes

    def __init__(self, recorded: "Sequence[Recorded]", result: Any = None,
                 check_stream: "Callable[[Any], None] | None" = None) -> None:
        if not recorded:
            raise ValueError("nothing to bind: the call launches nothing")
        self.recorded = tuple(recorded)
        self.result = result
        self.operands = None
        self._packs = []
        for r in self.recorded:
            pack = ArgPack(r.kernel.signature, r.kernel.name)
            pack.pack(r.args)
            self._packs.append(pack)
        self._launch = driver.raw_launch(True)
        self._check_stream = check_stream
        self._contexts = driver.process_state().contexts
        self._streams: dict = {}
        self._plan = self._plan_for([driver.stream_handle(r.stream) for r in self.recorded])

    def _plan_for(self, handles) -> tuple:
        """Per launch (config, handle, params address) on the stream ``handles`` name (one raw handle each)."""
        plan = []
        for r, pack, stream in zip(self.recorded, self._packs, handles):
            handle = r.kernel.handle if r.any_context and stream > 2 else r.kernel.function
            plan.append((driver.launch_config(r.grid, r.block, r.shared_bytes, stream, r.pdl), handle, pack.address))
        return plan[0] if len(plan) == 1 else tuple(plan)

    def _on(self, stream):
        """The plan on ``stream`` (another than the recorded one), built and checked once."""
        try:
            plan = self._streams.get(stream)
        except TypeError:  # unhashable: built and checked every call
            plan = None
        if plan is None:
            handle = driver.stream_handle(stream)
            if self._check_stream is not None:
                self._check_stream(stream)
            plan = self._plan_for([handle] * len(self.recorded))
            try:
                if len(self._streams) >= self._STREAMS_MAX:
                    self._streams.clear()
                self._streams[stream] = plan
            except TypeError:
                pass
        return plan

    def __call__(self, stream: Any = None) -> None:
        """Launch, on the recorded stream or on ``stream``."""
        if _binding and self._recording(stream):
            return
        config, handle, address = self._plan if stream is None else self._on(stream)
        result = self._launch(config, handle, address, 0)
        if result[0]:
            self._failed(0, config, handle, address, result)

    def _recording(self, stream) -> bool:
        """Inside binding() (a call being bound launches through a bound one): the launches recorded, not made."""
        made = _binding.get(get_ident())
        if made is not None:
            made.extend(self.recorded if stream is None else (r._replace(stream=stream) for r in self.recorded))
        return made is not None

    def _failed(self, index, config, handle, address, result) -> None:
        """A launch error: a kernel function's launch retried once after making its device's context current
        (as RowLaunch does), raised otherwise."""
        r = self.recorded[index]
        try:
            errors.check(result, "cuLaunchKernelEx")
        except errors.CudaError as exc:
            if exc.name not in _WRONG_CONTEXT or handle is not r.kernel.function or r.device is None:
                raise
        _make_current(r.device, self._contexts)
        errors.check(self._launch(config, handle, address, 0), "cuLaunchKernelEx")


class BoundLaunches(BoundLaunch):
    """A BoundLaunch of several launches (a call that makes more than one), made in their order."""

    __slots__ = ()

    def __call__(self, stream: Any = None) -> None:
        """Launch each, on the recorded streams or all on ``stream``."""
        if _binding and self._recording(stream):
            return
        for index, (config, handle, address) in enumerate(self._plan if stream is None else self._on(stream)):
            result = self._launch(config, handle, address, 0)
            if result[0]:
                self._failed(index, config, handle, address, result)


def bound(recorded: Sequence[Recorded], result: Any = None,
          check_stream: Callable[[Any], None] | None = None) -> BoundLaunch:
    """The BoundLaunch (one launch) or BoundLaunches (several) of ``recorded`` (binding()'s list)."""
    return (BoundLaunch if len(recorded) == 1 else BoundLaunches)(recorded, result, check_stream)


class Module:
    """A CUBIN loaded for one device (a CUlibrary: driver.image_load), its kernels looked up there. Lives
    as long as its Device."""

    def __init__(self, handle, device: driver.Device, sha256: str):
        self.handle = handle
        self.device = device
        self.sha256 = sha256
        self._kernels: dict[tuple[str, tuple[str, ...]], Kernel] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<pyrms Module {self.sha256[:12]} on device {self.device.ordinal}>"

    def function(self, name: str, signature) -> Kernel:
        """The kernel of lowered name ``name`` with argument kinds ``signature``, looked up once.
        KernelNotFoundError (a KeyError) if the module has no such kernel."""
        key = (name, tuple(signature))
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key)
                if kernel is None:
                    found = driver.image_kernel(self.handle, name, self.device)
                    if found is None:
                        raise KernelNotFoundError(f"no kernel named {name!r} in module {self.sha256[:12]}")
                    kernel = self._kernels[key] = Kernel(found[0], name, signature, self.device, found[1])
        return kernel


_modules_lock = threading.Lock()


def load_module(cubin: bytes, device=None) -> Module:
    """The Module of a CUBIN image on ``device`` (ordinal, Device or None for the current one),
    loaded once per (device, sha256 of the image). Hashing costs time: keep the Kernels you get."""
    if not isinstance(cubin, (bytes, bytearray, memoryview)):
        raise TypeError(f"cubin must be bytes, got {type(cubin).__name__}")
    cubin = bytes(cubin)
    if not cubin:
        raise ValueError("cubin is empty")
    device = driver.resolve_device(device)
    digest = hashlib.sha256(cubin).hexdigest()
    with _modules_lock:
        module = device.modules.get(digest)
        if module is None:
            image = driver.image_load(cubin)
            module = device.modules[digest] = Module(image, device, digest)
    return module


# Kernels ready to launch, by (device, source, name expression): compiled, loaded and looked up once, and kept
# in the Device (``Device.kernels``).
_compile_lock = threading.Lock()


def get_kernel(source: str, expression: str, group, signature: tuple[str, ...], device=None) -> Kernel:
    """The kernel `expression` of `source` on `device` (default: the current one).

    `group` is every name expression compiled together with it (one NVRTC run, one cache entry);
    `signature` the argument kinds for packing ("ptr", "i32", "i64", "f32", ...).
    """
    dev = driver.current_device() if device is None else device
    key = (source, expression)
    kernel = dev.kernels.get(key)
    if kernel is not None:
        return kernel
    with _compile_lock:
        kernel = dev.kernels.get(key)
        if kernel is None:
            program = compiler.compile_source(source, arch=dev.arch, name_expressions=tuple(group))
            module = load_module(program.cubin, dev)
            kernel = module.function(program.lowered_names[expression], signature)
            dev.kernels[key] = kernel
    return kernel

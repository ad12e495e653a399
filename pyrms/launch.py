"""CUBIN modules loaded once per device, kernels looked up once per name, arguments packed into
buffers built once per signature, and the launch itself.

This is on the hot path of every op, so a launch does no allocation beyond the few Python objects
the cuda.bindings call itself needs: the argument values are written with one ``struct.pack_into``
(which also range-checks them) into slots whose addresses were laid out when the pack was built.
"""
from __future__ import annotations

import ctypes
import hashlib
import operator
import struct
import threading

from . import driver, errors

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
# The Device whose context this thread last made current for a launch. Trusting it saves a
# cuCtxGetCurrent per launch; if another library switched contexts since, the launch fails
# without side effects and is retried after a real make_current.
_launch_context = threading.local()


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
    """A kernel ready to launch: a CUfunction, its name and its argument signature.

    ``device`` is the device whose primary context owns the function (made current before each
    launch); None leaves the current context as it is.
    """

    def __init__(self, function_handle, name: str, signature, device: driver.Device | None = None):
        self.handle = function_handle
        self.name = name
        self.signature = check_signature(signature)
        self.device = device
        self._packs = threading.local()

    def __repr__(self) -> str:
        return f"<pyrms Kernel {self.name} {self.signature}>"

    def launch(self, grid, block, args, stream=None, shared_bytes: int = 0) -> None:
        """Queue one launch on ``stream`` (a pyrms Stream, a raw handle, an object with
        ``.cuda_stream``, or None for the legacy default stream). ``grid``/``block``: an int or a
        1-3 tuple. ``args``: a sequence matching the signature."""
        if type(grid) is int and grid > 0:
            gx, gy, gz = grid, 1, 1
        else:
            gx, gy, gz = _dims(grid, "grid")
        if type(block) is int and block > 0:
            bx, by, bz = block, 1, 1
        else:
            bx, by, bz = _dims(block, "block")
        try:
            pack = self._packs.pack
        except AttributeError:
            pack = self._packs.pack = ArgPack(self.signature, self.name)
        try:  # ArgPack.pack, inlined: this is the hot path
            pack._pack_into(pack._buffer, 0, *args)
        except (struct.error, TypeError, OverflowError):
            raise pack._explain(args) from None
        device = self.device
        if device is not None and getattr(_launch_context, "device", None) is not device:
            device.make_current()
            _launch_context.device = device
        try:
            driver.launch_kernel(self.handle, gx, gy, gz, bx, by, bz, shared_bytes, stream, pack.address)
        except errors.CudaError as exc:
            if device is None or exc.name not in _WRONG_CONTEXT:
                raise
            device.make_current()
            _launch_context.device = device
            driver.launch_kernel(self.handle, gx, gy, gz, bx, by, bz, shared_bytes, stream, pack.address)

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
        device = self.device if self.device is not None else driver.current_device()
        driver.set_max_dynamic_shared(self.handle, nbytes, device)


class Module:
    """A CUBIN loaded into one device's primary context. Lives as long as the process."""

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
                    handle = driver.module_function(self.handle, name, self.device)
                    if handle is None:
                        raise KernelNotFoundError(f"no kernel named {name!r} in module {self.sha256[:12]}")
                    kernel = self._kernels[key] = Kernel(handle, name, signature, self.device)
        return kernel


_modules: dict[tuple[int, str], Module] = {}
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
    key = (device.ordinal, digest)
    with _modules_lock:
        module = _modules.get(key)
        if module is None:
            module = _modules[key] = Module(driver.module_load(cubin, device), device, digest)
    return module

"""The process's view of the driver: ``cuInit`` once, the device count, one Device per ordinal, and
each thread's selected device. All of pyrms's per-process state hangs off the one ``_Process`` object
here (each Device holds its own device's: modules, kernels, prepared launches, workspace pool), so a
test that swaps the driver (tests/support/fake_driver.py) replaces that one object and the calling thread's
selection. Beside it only scratch that holds no handle (_launcher's per-thread launch configuration)
and the compiler's in-memory cache, keyed by arch, not device, which needs no driver.

Importing touches no driver: ``cuInit`` is called at first use, where a missing driver (or no
device) becomes ``errors.NoDriverError``, raised then and on every later use.
"""
from __future__ import annotations

import operator
import threading
from typing import Union

from cuda.bindings import driver as _cu

from .. import errors
from ..errors import check
from ._device import Device

# A device argument: an ordinal, a Device, or None for the calling thread's (resolve_device).
DeviceLike = Union[int, Device, None]

_init_lock = threading.Lock()
_devices_lock = threading.Lock()


class _Process:
    """The per-process state: cuInit's outcome, the device count, the Devices by ordinal, the Device
    whose context each thread last made current for a launch (pyrms.launch), and which device each raw
    pointer and stream handle was accepted for (pyrms.ops._placement)."""

    __slots__ = ("initialized", "init_failure", "device_count", "devices", "contexts", "pointers", "streams")

    def __init__(self):
        self.initialized = False
        self.init_failure: str | None = None  # kept: a driver does not appear later in the same process
        self.device_count: int | None = None
        self.devices: dict[int, Device] = {}
        self.contexts: dict[int, Device] = {}  # threading.get_ident() -> Device
        self.pointers: dict[int, int] = {}  # raw pointer -> ordinal of the device it was accepted for
        self.streams: dict[int, int] = {}  # raw stream handle -> ordinal, likewise


_state = _Process()


def process_state() -> _Process:
    """The process's state object (for the layers above that keep process-wide tables in it)."""
    return _state


class _Selected(threading.local):
    """The calling thread's selected device (see set_device), like cudaSetDevice and
    torch.cuda.set_device. The class default makes an unset one a plain read: getattr with a default
    on a thread-local raises and catches AttributeError inside, about 1 µs on every launch."""

    device: "Device | None" = None


# One object for the life of the process: the package re-exports it for the hot path
# (``driver._selected.device`` in the ops' prepared launches), so it is reset per thread, never replaced.
_selected = _Selected()


def _one_line(exc: BaseException) -> str:
    """An exception as one line of text, for the reasons pyrms reports."""
    return " ".join(str(exc).split()) or type(exc).__name__


def ensure_init() -> None:
    """cuInit(0) once per process; any failure becomes NoDriverError, raised now and on every use."""
    state = _state
    if state.initialized:
        return
    with _init_lock:
        if not state.initialized and state.init_failure is None:
            try:
                check(_cu.cuInit(0), "cuInit")
                state.initialized = True
            except Exception as exc:  # DynamicLibNotFoundError (a RuntimeError), OSError, CudaError...
                state.init_failure = _one_line(exc)
    if state.init_failure is not None:
        raise errors.NoDriverError(f"no CUDA driver found: {state.init_failure}")


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


def device_count() -> int:
    """How many CUDA devices this process sees (asked once: the count cannot change in a process);
    NoDriverError without a driver."""
    state = _state
    if state.device_count is None:
        ensure_init()
        state.device_count = check(_cu.cuDeviceGetCount(), "cuDeviceGetCount")
    return state.device_count


def get_device(ordinal: int = 0) -> Device:
    """The Device of ``ordinal`` (one object per ordinal). ValueError names the allowed range."""
    devices = _state.devices
    device = devices.get(ordinal) if type(ordinal) is int else None
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
        device = devices.get(ordinal)
        if device is None:
            device = devices[ordinal] = Device(ordinal, check(_cu.cuDeviceGet(ordinal), "cuDeviceGet"))
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


def resolve_device(device: DeviceLike = None) -> Device:
    """A Device from None (the current one), an ordinal or a Device; made current."""
    if device is None:
        return current_device()
    if not isinstance(device, Device):
        device = get_device(device)
    device.make_current()
    return device


def ensure_context() -> None:
    """Some context current on this thread: the selected device's if there is none. Another
    library's choice (torch.cuda.set_device) is left alone, since unified addressing lets copies
    and pointer queries work from any context."""
    ensure_init()
    if int(check(_cu.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
        current_device()


def synchronize() -> None:
    """Wait for all work in the calling thread's current context."""
    ensure_context()
    check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")

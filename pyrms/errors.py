"""Exceptions, and the one checker every driver and NVRTC call goes through.

cuda-python returns ``(status, *values)`` tuples instead of raising. ``check``
turns a non-success status into an exception carrying the call's name, the
status's name and its description, and returns the values otherwise. The
status enums of different libraries are described by functions that the
modules owning those libraries register (``register_describer``), so this
module imports no CUDA library itself and stays importable everywhere.
"""
from __future__ import annotations

from typing import Any, Callable


class PyrmsError(Exception):
    """Base class of every exception pyrms raises on purpose."""


class CudaError(PyrmsError):
    """A CUDA driver or NVRTC call returned an error status."""

    def __init__(self, call: str, status: Any, name: str, description: str):
        self.call = call
        self.status = status
        self.name = name
        self.description = description
        super().__init__(f"{call} failed: {name}: {description}")


class OutOfMemoryError(CudaError):
    """A device allocation failed because the device has too little free memory."""


class NoDriverError(PyrmsError):
    """No usable CUDA driver (or no device) on this machine."""


class HeaderNotFoundError(PyrmsError):
    """CUDA headers needed by a kernel could not be located."""


class NvrtcNotFoundError(PyrmsError):
    """No NVRTC library to compile kernels with (neither the cu12 nor the cu13 extra installed, no toolkit)."""


class CompileError(PyrmsError):
    """NVRTC rejected a kernel source. Carries the log, options, arch and source."""

    def __init__(self, source_name: str, log: str, options: list[str], arch: str, source: str):
        self.source_name = source_name
        self.log = log
        self.options = list(options)
        self.arch = arch
        self.source = source
        listing = "\n".join(f"{i:5d} | {line}" for i, line in enumerate(source.splitlines(), 1))
        super().__init__(
            f"NVRTC failed to compile {source_name} for {arch}\n"
            f"options: {' '.join(options)}\n"
            f"--- log ---\n{log.rstrip()}\n"
            f"--- source ---\n{listing}"
        )


_describers: dict[type, Callable[[Any], tuple[str, str]]] = {}
_error_classes: dict[tuple[type, int], type[CudaError]] = {}


def register_describer(status_type: type, describe: Callable[[Any], tuple[str, str]]) -> None:
    """Teach ``check`` to name statuses of ``status_type``: ``describe(status) -> (name, text)``."""
    _describers[status_type] = describe


def register_error_class(status: Any, cls: type[CudaError]) -> None:
    """Raise ``cls`` (a CudaError subclass) instead of CudaError for one status value."""
    _error_classes[(type(status), int(status))] = cls


def check(result: Any, call: str) -> Any:
    """Unpack a cuda-python ``(status, *values)`` result, raising CudaError on failure.

    Returns None for no values, the value itself for one, a tuple for several.
    """
    if isinstance(result, tuple):
        status, values = result[0], result[1:]
    else:
        status, values = result, ()
    if int(status) != 0:
        describe = _describers.get(type(status))
        if describe is None:
            name, text = getattr(status, "name", str(status)), "(no description available)"
        else:
            name, text = describe(status)
        cls = _error_classes.get((type(status), int(status)), CudaError)
        raise cls(call, status, name, text)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)

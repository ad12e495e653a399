"""Copies between host and device memory and memsets: synchronous when ``stream`` is None, else
queued on the stream. Host sides are C-contiguous numpy arrays (checked: a copy moves one span of
bytes from the array's first, which holds the array only if it is contiguous)."""
from __future__ import annotations

import numpy as np
from cuda.bindings import driver as _cu

from ..errors import check
from ._process import ensure_context
from ._stream import stream_arg


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
    ensure_context()
    if stream is None:
        check(_cu.cuMemcpyHtoD(dst_ptr, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")
    else:
        check(_cu.cuMemcpyHtoDAsync(dst_ptr, src.ctypes.data, src.nbytes, stream_arg(stream)),
              "cuMemcpyHtoDAsync")


def memcpy_dtoh(dst: np.ndarray, src_ptr: int, stream=None) -> None:
    """Fill all of ``dst`` from device memory. stream=None: synchronous; else queued on ``stream``
    (the caller synchronizes before reading ``dst``)."""
    _host_array(dst, "dst", writable=True)
    if dst.nbytes == 0:
        return
    ensure_context()
    if stream is None:
        check(_cu.cuMemcpyDtoH(dst.ctypes.data, src_ptr, dst.nbytes), "cuMemcpyDtoH")
    else:
        check(_cu.cuMemcpyDtoHAsync(dst.ctypes.data, src_ptr, dst.nbytes, stream_arg(stream)),
              "cuMemcpyDtoHAsync")


def memcpy_dtod(dst_ptr: int, src_ptr: int, nbytes: int, stream=None) -> None:
    """Copy ``nbytes`` between device addresses. stream=None: returns when the copy is done."""
    if nbytes == 0:
        return
    ensure_context()
    if stream is None:
        check(_cu.cuMemcpyDtoD(dst_ptr, src_ptr, nbytes), "cuMemcpyDtoD")
        # The driver runs device-to-device copies asynchronously even without a stream.
        check(_cu.cuStreamSynchronize(0), "cuStreamSynchronize")
    else:
        check(_cu.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, stream_arg(stream)), "cuMemcpyDtoDAsync")


def memset_d8(ptr: int, byte: int, nbytes: int, stream=None) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to ``byte``. stream=None: returns when it is done."""
    if not 0 <= byte <= 255:
        raise ValueError(f"byte must be in 0..255, got {byte}")
    if nbytes == 0:
        return
    ensure_context()
    if stream is None:
        check(_cu.cuMemsetD8(ptr, byte, nbytes), "cuMemsetD8")
        check(_cu.cuStreamSynchronize(0), "cuStreamSynchronize")  # memsets are asynchronous too
    else:
        check(_cu.cuMemsetD8Async(ptr, byte, nbytes, stream_arg(stream)), "cuMemsetD8Async")

"""CUDA streams: ``Stream`` (created here or wrapped from a handle someone else owns), and the one
reading of every kind of stream argument pyrms accepts (a pyrms Stream, a raw handle, torch's
``.cuda_stream``, cuda.core's ``__cuda_stream__``, None for the legacy default stream)."""
from __future__ import annotations

from typing import Protocol, Union

from cuda.bindings import driver as _cu

from ..errors import check
from ._device import Device
from ._owned import _Owned
from ._process import DeviceLike, ensure_init, get_device, resolve_device


class HasCudaStream(Protocol):
    """torch.cuda.Stream and the like: the raw handle as ``.cuda_stream``."""

    @property
    def cuda_stream(self) -> int: ...


class CudaStreamProtocol(Protocol):
    """cuda.core's stream protocol: ``__cuda_stream__()`` returns (version, handle)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...


class Stream(_Owned):
    """A CUDA stream: created here (and destroyed by close()) or wrapped from a raw handle."""

    def __init__(self, device: DeviceLike = None, non_blocking: bool = False) -> None:
        device = resolve_device(device)
        flags = (_cu.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking
                 else _cu.CUstream_flags.CU_STREAM_DEFAULT)
        self._stream = check(_cu.cuStreamCreate(flags), "cuStreamCreate")
        self._own(device, [(_cu.cuStreamDestroy, self._stream, "cuStreamDestroy")])

    @classmethod
    def wrap(cls, handle: int, device: DeviceLike = None) -> "Stream":
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


# Every kind of stream argument stream_arg reads (pyrms._types names it for the public API).
StreamLike = Union[None, int, Stream, HasCudaStream, CudaStreamProtocol]


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
    ensure_init()
    # A CUdevice is its ordinal: cuDeviceGet(n) gives n.
    return int(check(_cu.cuStreamGetDevice(handle), "cuStreamGetDevice"))


def stream_arg(stream):
    """``stream`` as cuda.bindings takes it, fastest for the common kinds."""
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    if type(stream) is Stream:
        return stream._live()
    return stream_handle(stream)

"""CUDA events: recorded on a stream, waited on, and timed against each other."""
from __future__ import annotations

from cuda.bindings import driver as _cu

from ..errors import check
from ._owned import _Owned
from ._process import DeviceLike, resolve_device
from ._stream import StreamLike, stream_arg


class Event(_Owned):
    """A CUDA event; ``timing=False`` makes recording cheaper but elapsed_ms impossible."""

    def __init__(self, timing: bool = True, device: DeviceLike = None) -> None:
        device = resolve_device(device)
        flags = _cu.CUevent_flags.CU_EVENT_DEFAULT if timing else _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.timing = bool(timing)
        self._event = check(_cu.cuEventCreate(flags), "cuEventCreate")
        self._own(device, [(_cu.cuEventDestroy, self._event, "cuEventDestroy")])

    def _live(self):
        if self._closed:
            raise ValueError("event is closed")
        return self._event

    def record(self, stream: StreamLike = None) -> None:
        """Record on ``stream`` (see stream_handle; None: the legacy default stream)."""
        event = self._live()
        self.device.make_current()  # a NULL stream means the current context's: it must be the event's
        check(_cu.cuEventRecord(event, stream_arg(stream)), "cuEventRecord")

    def synchronize(self) -> None:
        """Wait until the work before the last record() has finished."""
        check(_cu.cuEventSynchronize(self._live()), "cuEventSynchronize")

    def elapsed_ms(self, since: "Event") -> float:
        """Milliseconds from ``since`` to this event; both recorded, both with timing."""
        if not (self.timing and since.timing):
            raise ValueError("elapsed_ms needs two events created with timing=True")
        return float(check(_cu.cuEventElapsedTime(since._live(), self._live()), "cuEventElapsedTime"))

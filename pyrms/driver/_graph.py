"""CUDA graphs: ``capture(stream)`` records the work queued on a stream into a ``Graph``, which
``launch()`` replays (instantiated once, at its first launch)."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from cuda.bindings import driver as _cu

from ..errors import check
from ._device import Device
from ._owned import _Owned
from ._process import current_device
from ._stream import Stream, stream_arg, stream_handle

_LEGACY_STREAMS = (0, 1)  # NULL and CU_STREAM_LEGACY: the legacy default stream cannot be captured


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
        check(_cu.cuGraphLaunch(self._exec, stream_arg(stream)), "cuGraphLaunch")


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

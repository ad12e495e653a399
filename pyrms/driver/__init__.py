"""The CUDA driver: initialisation, devices and their primary contexts, streams, events, memory,
copies, module loading, kernel launches and graph capture.

The only package that imports ``cuda.bindings.driver``; one private module per concept, and this
``__init__`` the one surface (``from pyrms import driver; driver.X``):

- ``_status``: how ``errors.check`` names a CUresult (registered at import)
- ``_device``: ``Device``, one device's attributes and its primary context
- ``_process``: cuInit, the device count and table, each thread's selected device: the per-process
  state, in one object (each Device holding its own device's)
- ``_owned``: the close()/finalizer base of every handle-owning object
- ``_stream``, ``_event``: streams and the reading of stream arguments; events
- ``_memory``, ``_copy``: device, pooled and pinned memory, pointer ownership; copies and memsets
- ``_module``, ``_launcher``: CUBIN images loaded as libraries (or modules) and their kernels;
  launches, PDL included
- ``_graph``: stream capture into graphs

Each module that calls the driver binds it as its global ``_cu`` (tests/support/fake_driver.py swaps a
stand-in into every one). Importing touches no driver: the library is loaded and ``cuInit`` called
at first use, where a missing driver (or no device) becomes ``errors.NoDriverError``. Every call's
status goes through ``errors.check``.
"""
from . import _status  # noqa: F401  (registers the CUresult describer with errors)
from ._copy import memcpy_dtod, memcpy_dtoh, memcpy_htod, memset_d8
from ._device import Device
from ._event import Event
from ._graph import Graph, capture
from ._launcher import launch_config, launch_kernel, pdl_config, raw_launch
from ._memory import DeviceBuffer, MemoryPool, PinnedBuffer, pointer_device
from ._module import image_kernel, image_load, set_max_dynamic_shared
from ._owned import _Owned
from ._process import (DeviceLike, _selected, current_device, device_count, driver_version, get_device, process_state,
                       resolve_device, selected_device, set_device, synchronize, unavailable_reason)
from ._stream import CudaStreamProtocol, HasCudaStream, Stream, StreamLike, stream_device, stream_handle

__all__ = [
    "Device", "DeviceBuffer", "Event", "Graph", "MemoryPool", "PinnedBuffer", "Stream",
    "CudaStreamProtocol", "DeviceLike", "HasCudaStream", "StreamLike",  # argument types, for annotations
    "capture", "current_device", "device_count", "driver_version", "get_device", "image_kernel", "image_load",
    "launch_config", "launch_kernel", "memcpy_dtod", "memcpy_dtoh", "memcpy_htod", "memset_d8", "pdl_config",
    "pointer_device", "process_state", "raw_launch", "resolve_device", "selected_device", "set_device",
    "set_max_dynamic_shared", "stream_device", "stream_handle", "synchronize", "unavailable_reason",
]

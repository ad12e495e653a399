"""The base of every object owning driver handles (streams, events, buffers, pools, graphs): ``close()``
frees them, else a ``weakref.finalize`` does at garbage collection or exit, with the owning device's
context pushed so that cleanup on any thread never switches the caller's device."""
from __future__ import annotations

import contextlib
import weakref

from ..errors import check
from ._device import Device


def _release(device: Device | None, resources: list, quiet: bool) -> None:
    """Destroy ``(destroy, handle, call)`` resources with ``device``'s context pushed. Finalizers pass
    quiet=True: at garbage collection or interpreter exit an exception could only be printed."""
    try:
        with device._pushed() if device is not None else contextlib.nullcontext():
            for destroy, handle, call in resources:
                check(destroy(handle), call)
    except Exception:
        if not quiet:
            raise


class _Owned:
    """Base of objects owning driver handles: ``close()`` frees them (idempotent), else a
    ``weakref.finalize`` does at garbage collection or exit. No ``__del__``: it could raise at shutdown."""

    def _own(self, device: Device | None, resources: list) -> None:
        self.device = device
        self._resources = resources  # Graph appends to it once its handles exist
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, device, resources, True)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Free the driver handles now; later calls do nothing."""
        self._closed = True
        if self._finalizer.detach() is not None:
            _release(self.device, self._resources, False)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

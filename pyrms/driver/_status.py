"""How ``errors.check`` names and describes a CUresult, and which exception class a status raises:
registered with ``errors`` when the package is imported."""
from __future__ import annotations

from cuda.bindings import driver as _cu

from .. import errors

_SUCCESS = _cu.CUresult.CUDA_SUCCESS


def _describe(status) -> tuple[str, str]:
    """Name and description of a CUresult. Called by ``check`` itself, so it calls the driver
    directly; without a driver library it falls back on the enum's own name and docstring."""
    try:
        name_err, name = _cu.cuGetErrorName(status)
        text_err, text = _cu.cuGetErrorString(status)
        if name_err == _SUCCESS and text_err == _SUCCESS:
            return name.decode(), text.decode()
    except Exception:  # the driver library is missing: describe the status without it
        pass
    doc = getattr(status, "__doc__", None)
    if not doc or doc == type(status).__doc__:
        doc = "(the CUDA driver is not available to describe it)"
    return getattr(status, "name", str(status)), " ".join(doc.split())


errors.register_describer(_cu.CUresult, _describe)
errors.register_error_class(_cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, errors.OutOfMemoryError)

"""CUBIN modules loaded into a device's primary context, their functions looked up by (lowered)
name, and function attributes. pyrms.launch caches what these return."""
from __future__ import annotations

from cuda.bindings import driver as _cu

from ..errors import check
from ._device import Device


def module_load(image: bytes, device: Device):
    """Load a CUBIN image into ``device``'s primary context; returns the CUmodule."""
    device.make_current()
    return check(_cu.cuModuleLoadData(image), "cuModuleLoadData")


def module_function(module, name: str, device: Device):
    """The CUfunction ``name`` of ``module``, or None if the module has no such function."""
    device.make_current()
    result = _cu.cuModuleGetFunction(module, name.encode())
    if result[0] == _cu.CUresult.CUDA_ERROR_NOT_FOUND:
        return None
    return check(result, "cuModuleGetFunction")


def set_max_dynamic_shared(function, nbytes: int, device: Device) -> None:
    """Allow ``function`` up to ``nbytes`` of dynamic shared memory (needed above 48 KiB)."""
    device.make_current()
    attribute = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(_cu.cuFuncSetAttribute(function, attribute, nbytes), "cuFuncSetAttribute")

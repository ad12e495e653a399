"""CUBIN images loaded for their kernels, and kernel attributes. pyrms.launch caches what these return.

Images load with cuLibraryLoadData, context-independent: cuLibraryGetKernel gives a CUkernel, which
launches in whatever context runs the launch (the stream's, or the current one on a default stream),
the driver loading the image there first; cuKernelGetFunction gives the CUfunction of one context, for
launches that must fail rather than run in another device's context. (cuModuleLoadData into the primary
context measured no faster on the launch path on the H200's host: docs/perf_notes.md.)
"""
from __future__ import annotations

from cuda.bindings import driver as _cu

from ..errors import check
from ._device import Device

_MAX_DYNAMIC_SHARED = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def image_load(image: bytes):
    """Load a CUBIN image as a library (context-independent); returns the CUlibrary."""
    return check(_cu.cuLibraryLoadData(image, [], [], 0, [], [], 0), "cuLibraryLoadData")


def image_kernel(image, name: str, device: Device):
    """``(kernel, function)`` of the kernel ``name`` in the library ``image`` (from image_load): the
    CUkernel and its CUfunction in ``device``'s primary context; None if it has no such kernel."""
    result = _cu.cuLibraryGetKernel(image, name.encode())
    if result[0] == _cu.CUresult.CUDA_ERROR_NOT_FOUND:
        return None
    kernel = check(result, "cuLibraryGetKernel")
    device.make_current()
    return kernel, check(_cu.cuKernelGetFunction(kernel), "cuKernelGetFunction")


def set_max_dynamic_shared(handle, function, nbytes: int, device: Device) -> None:
    """Allow up to ``nbytes`` of dynamic shared memory (needed above 48 KiB) to a kernel on ``device``:
    ``handle`` a CUkernel or a CUfunction, ``function`` the CUfunction that launches in ``device``'s
    context (``handle`` itself for a CUfunction). A CUkernel's attribute is set for the device, and
    its function's too, since launches use either."""
    if isinstance(handle, _cu.CUkernel):
        check(_cu.cuKernelSetAttribute(_MAX_DYNAMIC_SHARED, nbytes, handle, device._handle), "cuKernelSetAttribute")
    device.make_current()
    check(_cu.cuFuncSetAttribute(function, _MAX_DYNAMIC_SHARED, nbytes), "cuFuncSetAttribute")

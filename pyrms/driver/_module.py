"""CUBIN images loaded for their kernels, and kernel attributes. pyrms.launch caches what these return.

Two ways to load, chosen by ``PYRMS_KERNEL_LOADING`` when an image is loaded:

- ``library`` (the default): cuLibraryLoadData, context-independent. cuLibraryGetKernel gives a
  CUkernel, which launches in whatever context runs the launch (the stream's, or the current one on a
  default stream), the driver loading the image there first; cuKernelGetFunction gives the CUfunction
  of one context, for launches that must fail rather than run in another device's context.
- ``module``: cuModuleLoadData into the device's primary context; cuModuleGetFunction gives a
  CUfunction of that context only. Kept so that both can be timed (tools/launch_loading_bench.py).
"""
from __future__ import annotations

import os

from cuda.bindings import driver as _cu

from ..errors import check
from ._device import Device

LOADINGS = ("library", "module")
_MAX_DYNAMIC_SHARED = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def kernel_loading() -> str:
    """How images are loaded now: ``PYRMS_KERNEL_LOADING`` ("library" unless set), validated."""
    value = os.environ.get("PYRMS_KERNEL_LOADING", "").strip().lower() or "library"
    if value not in LOADINGS:
        raise ValueError(f"PYRMS_KERNEL_LOADING is {value!r}; allowed: {', '.join(LOADINGS)}")
    return value


def image_load(image: bytes, device: Device, loading: str):
    """Load a CUBIN image as ``loading`` says (see kernel_loading); returns the CUlibrary or the
    CUmodule (loaded into ``device``'s primary context)."""
    if loading == "library":
        return check(_cu.cuLibraryLoadData(image, [], [], 0, [], [], 0), "cuLibraryLoadData")
    device.make_current()
    return check(_cu.cuModuleLoadData(image), "cuModuleLoadData")


def image_kernel(image, name: str, device: Device):
    """``(handle, function)`` of the kernel ``name`` in ``image`` (from image_load), or None if it has
    no such kernel: for a library the CUkernel and its CUfunction in ``device``'s primary context, for
    a module its CUfunction and None (it has no other)."""
    if isinstance(image, _cu.CUlibrary):
        result = _cu.cuLibraryGetKernel(image, name.encode())
        if result[0] == _cu.CUresult.CUDA_ERROR_NOT_FOUND:
            return None
        kernel = check(result, "cuLibraryGetKernel")
        device.make_current()
        return kernel, check(_cu.cuKernelGetFunction(kernel), "cuKernelGetFunction")
    device.make_current()
    result = _cu.cuModuleGetFunction(image, name.encode())
    if result[0] == _cu.CUresult.CUDA_ERROR_NOT_FOUND:
        return None
    return check(result, "cuModuleGetFunction"), None


def set_max_dynamic_shared(handle, function, nbytes: int, device: Device) -> None:
    """Allow up to ``nbytes`` of dynamic shared memory (needed above 48 KiB) to a kernel on ``device``:
    ``handle`` a CUkernel or a CUfunction, ``function`` the CUfunction that launches in ``device``'s
    context (``handle`` itself for a CUfunction). A CUkernel's attribute is set for the device, and
    its function's too, since launches use either."""
    if isinstance(handle, _cu.CUkernel):
        check(_cu.cuKernelSetAttribute(_MAX_DYNAMIC_SHARED, nbytes, handle, device._handle), "cuKernelSetAttribute")
    device.make_current()
    check(_cu.cuFuncSetAttribute(function, _MAX_DYNAMIC_SHARED, nbytes), "cuFuncSetAttribute")

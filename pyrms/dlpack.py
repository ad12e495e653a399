"""DLPack both ways, through ctypes: the C structures of ``dlpack.h`` (the versioned 1.x
``DLManagedTensorVersioned`` and the legacy ``DLManagedTensor``), the export of a pyrms.Tensor as a
capsule (``Tensor.__dlpack__``), and the reading of any producer's capsule (the ops' operand reader).

Export: the consumer receives a capsule over a structure pyrms allocated; the structure, its shape and
strides arrays and the Tensor stay in a table of live exports until the structure's deleter runs, so
the Tensor (and the buffer it holds) cannot be garbage collected while the consumer uses it. The
deleter runs once: called by the consumer when it is done (having renamed the capsule
"used_dltensor[_versioned]"), or by the capsule's destructor when no consumer took the capsule.

Both are Python functions called through ctypes, which takes the GIL, so consumers may call them from
any thread. What a C producer does and ctypes cannot: save and restore an exception that is
propagating when they run. A consumer's array freed as a temporary of an expression that is raising
(``f(torch.from_dlpack(t), 1 / 0)``) makes CPython report a SystemError instead of that exception;
arrays held in variables are freed after the exception is handled, and are not affected.

Import: the producer's DLTensor is read in place while its capsule is referenced (``describe``), and
the capsule is never consumed: its destructor returns it to the producer.
"""
from __future__ import annotations

import ctypes
import enum
from typing import NamedTuple

from . import dtypes

VERSION = (1, 0)  # the DLPack ABI pyrms exports; it reads every 1.x
LEGACY_NAME = b"dltensor"
VERSIONED_NAME = b"dltensor_versioned"
READ_ONLY = 1 << 0  # DLPACK_FLAG_BITMASK_READ_ONLY
IS_COPIED = 1 << 1  # DLPACK_FLAG_BITMASK_IS_COPIED


class DeviceType(enum.IntEnum):
    """``DLDeviceType`` values pyrms names (``__dlpack_device__`` returns them, as the array API asks)."""

    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    CUDA_MANAGED = 13


# (DLDataTypeCode, bits) of each storage dtype: kDLFloat is 2, kDLBfloat 4.
CODES = {dtypes.FLOAT16: (2, 16), dtypes.FLOAT32: (2, 32), dtypes.BFLOAT16: (4, 16)}
DTYPES = {code: dt for dt, code in CODES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


def _capi(name: str, restype, *argtypes):
    """A CPython C-API function with its own prototype (PYFUNCTYPE: called with the GIL held)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_capsule_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
# The destructor's own: it gets the capsule as an address, its reference count already zero, which a
# py_object argument would raise and drop again (freeing it twice).
_dying_capsule_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_dying_capsule_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
# A capsule keeps the pointer to its name, not a copy: these buffers live as long as the module.
_NAMES = {name: ctypes.create_string_buffer(name) for name in (LEGACY_NAME, VERSIONED_NAME)}

# --- export ------------------------------------------------------------------------------------------


class _Export(NamedTuple):
    """What one capsule's structure needs alive until its deleter runs."""

    managed: ctypes.Structure  # DLManagedTensor or DLManagedTensorVersioned
    shape: ctypes.Array
    strides: ctypes.Array
    tensor: object  # the exported pyrms.Tensor, and through it its buffer


_live: dict[int, _Export] = {}  # the address of each exported structure -> what it keeps alive


def live_exports() -> int:
    """How many exported structures no deleter has released yet."""
    return len(_live)


def _release(address: int) -> None:
    _live.pop(address, None)  # a second call (a consumer's mistake) finds nothing to free


_deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_release)  # void (*deleter)(DLManagedTensor[Versioned] *self)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    """The capsule is going: release its structure unless a consumer took it (renamed it "used_...")
    and will call the deleter itself."""
    for name in (VERSIONED_NAME, LEGACY_NAME):
        if _dying_capsule_valid(capsule, name):
            _release(_dying_capsule_pointer(capsule, name))
            return


def export(tensor, ptr: int, device: int, versioned: bool):
    """A capsule over a new structure describing ``tensor`` (a pyrms.Tensor) at ``ptr`` on CUDA device
    ``device``: "dltensor_versioned" (version 1.0, no flags: writable, not a copy) or the legacy
    "dltensor". Strides are always given, in elements; ``byte_offset`` is 0 and ``data`` the address
    itself, as PyTorch and CuPy export (pyrms's views may start at any address)."""
    ndim = len(tensor.shape)
    shape = (ctypes.c_int64 * ndim)(*tensor.shape)
    strides = (ctypes.c_int64 * ndim)(*tensor.strides)
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    if versioned:
        managed.version.major, managed.version.minor = VERSION
    dl = managed.dl_tensor
    dl.data, dl.ndim, dl.byte_offset = ptr, ndim, 0
    dl.device.device_type, dl.device.device_id = DeviceType.CUDA, device
    dl.dtype.code, dl.dtype.bits = CODES[tensor.dtype]
    dl.dtype.lanes = 1
    dl.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    dl.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = ctypes.cast(_deleter, ctypes.c_void_p).value
    address = ctypes.addressof(managed)
    _live[address] = _Export(managed, shape, strides, tensor)
    name = _NAMES[VERSIONED_NAME if versioned else LEGACY_NAME]
    try:
        return _capsule_new(address, ctypes.addressof(name), ctypes.cast(_capsule_destructor, ctypes.c_void_p).value)
    except BaseException:
        _release(address)
        raise


# --- import ------------------------------------------------------------------------------------------


class Described(NamedTuple):
    """A producer's DLTensor, as Python values (nothing in it points into the capsule)."""

    ptr: int  # data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # elements; None where the producer left them out (C-contiguous)
    code: int
    bits: int
    lanes: int
    device_type: int
    device_id: int
    flags: int  # 0 for a legacy capsule
    version: tuple[int, int] | None  # None for a legacy capsule


def describe(capsule) -> Described:
    """Read the DLTensor of a "dltensor_versioned" (version 1.x) or legacy "dltensor" capsule in place.
    TypeError for anything else, ValueError for another major version. The caller keeps ``capsule``
    alive while this runs, and drops it before raising errors of its own (see the module docstring)."""
    if _capsule_valid(capsule, VERSIONED_NAME):
        managed = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, VERSIONED_NAME))
        version = (managed.version.major, managed.version.minor)
        if version[0] != VERSION[0]:  # the fields past the version may differ: read none of them
            raise ValueError(f"DLPack version {version[0]}.{version[1]}; pyrms reads version {VERSION[0]}.x")
        flags = managed.flags
    elif _capsule_valid(capsule, LEGACY_NAME):
        managed = DLManagedTensor.from_address(_capsule_pointer(capsule, LEGACY_NAME))
        version, flags = None, 0
    else:
        raise TypeError(f"{type(capsule).__name__} is not a 'dltensor_versioned' or 'dltensor' capsule")
    dl = managed.dl_tensor
    ndim = dl.ndim
    return Described((dl.data or 0) + dl.byte_offset, tuple(dl.shape[i] for i in range(ndim)),
                     tuple(dl.strides[i] for i in range(ndim)) if dl.strides else None,
                     dl.dtype.code, dl.dtype.bits, dl.dtype.lanes, dl.device.device_type, dl.device.device_id,
                     flags, version)

"""Tensor: a description of device memory (pointer, shape, strides in elements, dtype, device).

A Tensor can describe any memory, including views whose base is deliberately misaligned, so the
kernels' alignment and stride handling can be exercised on purpose. Building one from a raw
pointer, taking views and asking about alignment touch no driver; only allocation and copies do.

Interoperability, out: DLPack (``__dlpack__``, ``__dlpack_device__``: ``torch.from_dlpack(t)``,
``cupy.from_dlpack(t)``) for every dtype, bfloat16 as DLPack's own bfloat16; and
``__cuda_array_interface__`` (version 3) for float16 and float32. The interface has no bfloat16 typestr,
so a bfloat16 Tensor has none (AttributeError, as if the attribute were absent): exported as '<i2', as it
once was, every consumer computed on int16 values without a word, where now consumers that look for the
interface before DLPack find DLPack, and the others fail at once. In: any object exposing
``__cuda_array_interface__`` (``from_cuda_array``; PyTorch cannot export bfloat16 through it, so pass
``t.view(torch.int16)`` with ``dtype='bfloat16'``: raw 2-byte types are read as bfloat16 only when that
dtype is given); the ops read DLPack arrays too.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Protocol, SupportsIndex, Union

import numpy as np
import numpy.typing as npt

from . import dlpack, driver, dtypes, errors
from .driver import DeviceLike
from .dtypes import DTypeLike

# A shape or strides: one int, or a sequence of ints (Python's or numpy's).
ShapeLike = Union[SupportsIndex, Sequence[SupportsIndex]]

_TYPESTR = {"float16": "<f2", "float32": "<f4"}  # bfloat16 has none (the module docstring says why)
_RAW_2BYTE = ("i2", "u2", "V2")  # typestrs (after the byte-order character) readable as bfloat16


def _int(value, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None


def _dims(values, what: str) -> tuple[int, ...]:
    """Non-negative ints, from an int or a sequence."""
    if type(values) is tuple and all(type(v) is int and v >= 0 for v in values):  # the common case, fast
        return values
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = (values,)
    dims = tuple(_int(v, f"{what} entry") for v in values)
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} entries must be >= 0, got {dims}")
    return dims


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides in elements (a zero-size dimension counts as one, as in PyTorch)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class CudaArray(Protocol):
    """Anything exporting ``__cuda_array_interface__`` (version 3)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class Tensor:
    """Device memory at ``ptr`` (bytes) holding ``shape`` elements of ``dtype`` at ``strides``
    (elements, >= 0; default C-contiguous). ``device`` is the owning device's ordinal, or None when
    not known (no driver, or memory the driver does not know); ``owner`` is kept alive with the
    tensor (a DeviceBuffer for tensors pyrms allocated, the exporting object for imported ones).
    """

    def __init__(self, ptr: int, shape: ShapeLike, dtype: DTypeLike, strides: ShapeLike | None = None,
                 device: DeviceLike = None, owner: Any = None) -> None:
        ptr = _int(ptr, "ptr")
        if not 0 <= ptr < 2**64:
            raise ValueError(f"ptr must be in [0, 2**64), got {ptr}")
        self.shape = _dims(shape, "shape")
        self.strides = contiguous_strides(self.shape) if strides is None else _dims(strides, "strides")
        if len(self.strides) != len(self.shape):
            raise ValueError(f"strides {self.strides} must have one entry per dimension of shape {self.shape}")
        self.dtype = dtypes.get(dtype)
        if isinstance(device, driver.Device):
            device = device.ordinal
        self.device = None if device is None else _int(device, "device")
        self.owner = owner
        self._ptr = ptr
        self._owns_buffer = False  # set by the constructors that allocate
        self._closed = False

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def empty(cls, shape: ShapeLike, dtype: DTypeLike, device: DeviceLike = None) -> Tensor:
        """A new C-contiguous tensor in device memory (uninitialised); close() frees it."""
        shape, dt = _dims(shape, "shape"), dtypes.get(dtype)
        dev = driver.resolve_device(device)
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes == 0:
            return cls(0, shape, dt, device=dev.ordinal)
        buffer = driver.DeviceBuffer(nbytes, dev)
        tensor = cls(buffer.ptr, shape, dt, device=dev.ordinal, owner=buffer)
        tensor._owns_buffer = True
        return tensor

    @classmethod
    def from_numpy(cls, array: npt.ArrayLike, device: DeviceLike = None) -> Tensor:
        """A device copy of a numpy array (float16, float32, or ml_dtypes.bfloat16)."""
        array = np.asarray(array)
        tensor = cls.empty(array.shape, dtypes.get(array.dtype), device)
        tensor.copy_from_numpy(array)
        return tensor

    @classmethod
    def from_cuda_array(cls, obj: CudaArray, dtype: DTypeLike | None = None) -> Tensor:
        """A Tensor over the memory of any object exposing ``__cuda_array_interface__``, which it
        keeps alive. Raw 2-byte typestrs ('<i2', '<u2', '<V2') need ``dtype='bfloat16'``. The device
        comes from the driver; without a driver (or for memory it does not know) it is None.
        The producer's CAI ``stream`` is not waited on: queue pyrms work on that stream."""
        try:
            interface = obj.__cuda_array_interface__
        except AttributeError as exc:  # a bfloat16 Tensor's says why it has none
            raise TypeError(str(exc) if isinstance(obj, Tensor) else
                            f"{type(obj).__name__} does not expose __cuda_array_interface__") from None
        if not isinstance(interface, dict):
            raise TypeError(f"__cuda_array_interface__ must be a dict, got {type(interface).__name__}")
        missing = [key for key in ("shape", "typestr", "data") if key not in interface]
        if missing:
            raise ValueError(f"__cuda_array_interface__ lacks {', '.join(repr(k) for k in missing)}")
        if interface.get("mask") is not None:
            raise ValueError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
        dt = _dtype_from_typestr(interface["typestr"], None if dtype is None else dtypes.get(dtype))
        shape = _dims(interface["shape"], "shape")
        byte_strides = interface.get("strides")
        strides = None if byte_strides is None else _element_strides(byte_strides, dt)
        ptr = _int(interface["data"][0], "data pointer")
        if isinstance(obj, Tensor):
            device = obj.device
        else:
            device = _pointer_device(ptr) if ptr else None
        return cls(ptr, shape, dt, strides, device, owner=obj)

    # -- geometry (no driver) -------------------------------------------------------------------

    @property
    def ptr(self) -> int:
        """Address of element [0, ..., 0] in bytes. ValueError once the tensor is closed."""
        if self.closed:
            raise ValueError("tensor is closed")
        return self._ptr

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def span_elements(self) -> int:
        """Elements from the first to one past the last one addressed, gaps included."""
        if self.numel == 0:
            return 0
        return 1 + sum(stride * (size - 1) for size, stride in zip(self.shape, self.strides))

    @property
    def nbytes_span(self) -> int:
        """Bytes from the first element to one past the last, gaps included."""
        return self.span_elements * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous (strides of size-1 dimensions do not matter)."""
        if self.numel == 0:
            return True
        expected = contiguous_strides(self.shape)
        return all(size == 1 or stride == want
                   for size, stride, want in zip(self.shape, self.strides, expected))

    @property
    def alignment(self) -> int:
        """The largest power of two, at most 16, dividing the address (16 for a null pointer)."""
        return 16 if self._ptr == 0 else min(16, self._ptr & -self._ptr)

    def is_aligned(self, nbytes: int) -> bool:
        """Whether the address is a multiple of ``nbytes``."""
        nbytes = _int(nbytes, "nbytes")
        if nbytes <= 0:
            raise ValueError(f"nbytes must be > 0, got {nbytes}")
        return self._ptr % nbytes == 0

    def view(self, offset: int = 0, shape: ShapeLike | None = None, strides: ShapeLike | None = None) -> Tensor:
        """A view starting ``offset`` ELEMENTS past this tensor's base (any offset, so any
        misalignment), with ``shape`` (default: this one's) and ``strides`` (default: this one's
        when the shape is kept, else C-contiguous). It must lie within this tensor's span."""
        offset = _int(offset, "offset")
        if offset < 0:
            raise ValueError(f"view offset must be >= 0, got {offset}")
        if shape is None:
            shape = self.shape
            if strides is None:
                strides = self.strides
        base = self.ptr + offset * self.dtype.itemsize
        child = Tensor(base, shape, self.dtype, strides, self.device, owner=self.owner)
        end = offset + child.span_elements
        if end > self.span_elements:  # an empty view has end == offset, so it is checked too
            raise ValueError(f"view at offset {offset} with shape {child.shape} and strides {child.strides} "
                             f"covers elements [{offset}, {end}), outside the {self.span_elements} "
                             f"elements this tensor spans")
        return child

    def row_view(self, num_rows: int, hidden: int, row_stride: int, offset: int = 0) -> "Tensor":
        """A [num_rows, hidden] view whose rows start ``row_stride`` elements apart."""
        return self.view(offset, (num_rows, hidden), (row_stride, 1))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CAI version 3, for float16 and float32. AttributeError for bfloat16, which the interface
        cannot name (see the module docstring): ``hasattr`` is False, and consumers go to DLPack."""
        typestr = _TYPESTR.get(self.dtype.name)
        if typestr is None:
            raise AttributeError(f"a {self.dtype.name} Tensor has no __cuda_array_interface__: the interface has no "
                                 f"{self.dtype.name} typestr; use DLPack (torch.from_dlpack(t), cupy.from_dlpack(t))")
        itemsize = self.dtype.itemsize
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None if self.is_contiguous else tuple(s * itemsize for s in self.strides),
            "version": 3,
        }

    def __dlpack_device__(self) -> tuple[dlpack.DeviceType, int]:
        """``(DeviceType.CUDA, ordinal)``. BufferError when the device is unknown: a Tensor built on a
        raw pointer without ``device=``, where no driver knows the pointer."""
        device = self.device
        if device is None:
            device = _pointer_device(self.ptr) if self.ptr else None
        if device is None:
            raise BufferError(f"the device of the memory at {self._ptr:#x} is unknown: build the Tensor with "
                              "device= to export it through DLPack")
        return dlpack.DeviceType.CUDA, device

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None):
        """This memory as a DLPack capsule, without a copy (the Python array API's protocol; consumers
        call it: ``torch.from_dlpack(t)``). ``max_version``: the consumer's newest DLPack version; from
        (1, 0) on, a "dltensor_versioned" capsule of version 1.0, else (None, or an older one) a legacy
        "dltensor" capsule. bfloat16 is DLPack's bfloat16 (kDLBfloat, 16 bits). The consumer's array
        keeps this Tensor, and its buffer, from being garbage collected; ``close()`` still frees the
        buffer at once, so keep the tensor open while the consumer uses the memory.

        ``stream``: the consumer's stream (None, 1, 2, a stream handle, or -1 for no synchronization, as
        the protocol defines them). A Tensor records no work of its own: pyrms queues each call on the
        stream that call was given, so nothing is waited on here; order that stream before the
        consumer's (or synchronize) before the consumer reads what pyrms wrote. ``dl_device``: None or
        this tensor's own ``__dlpack_device__()``; ``copy``: None or False (pyrms exports in place).
        BufferError for any other device or copy=True; ValueError/TypeError for a malformed argument."""
        _check_stream(stream)
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"dl_device {tuple(dl_device)} is not this tensor's device ({device[0]:d}, {device[1]}): "
                              "pyrms exports its memory where it is; allowed: None or the tensor's own device")
        if copy:
            raise BufferError("copy=True: pyrms exports its memory in place; allowed: copy=None or False "
                              "(copy on the consumer's side)")
        return dlpack.export(self, self.ptr, device[1], _versioned(max_version))

    # -- data (driver) --------------------------------------------------------------------------

    def to_numpy(self) -> np.ndarray:
        """A fresh C-contiguous host copy with this tensor's shape (copies the whole span)."""
        ptr = self.ptr
        if self.numel == 0:
            return np.empty(self.shape, self.dtype.numpy)
        host = np.empty(self.span_elements, self.dtype.numpy)
        driver.memcpy_dtoh(host, ptr)
        if self.is_contiguous:
            return host.reshape(self.shape)
        byte_strides = tuple(s * self.dtype.itemsize for s in self.strides)
        return np.lib.stride_tricks.as_strided(host, self.shape, byte_strides).copy(order="C")

    def copy_from_numpy(self, array: npt.ArrayLike) -> None:
        """Overwrite a contiguous tensor with a host array of the same shape and dtype."""
        array = np.asarray(array)
        if not self.is_contiguous:
            raise ValueError(f"copy_from_numpy needs a contiguous tensor, got strides {self.strides} "
                             f"for shape {self.shape}")
        if array.shape != self.shape:
            raise ValueError(f"array shape {array.shape} does not match the tensor's {self.shape}")
        if array.dtype != self.dtype.numpy:
            raise ValueError(f"array dtype {array.dtype} does not match the tensor's {self.dtype.name}")
        driver.memcpy_htod(self.ptr, np.ascontiguousarray(array))

    def fill_bytes(self, byte: int) -> None:
        """Set every byte of the span to ``byte``, gaps between rows included (to poison outputs)."""
        driver.memset_d8(self.ptr, byte, self.nbytes_span)

    # -- lifetime -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after close(), or once the buffer under this view has been closed."""
        owner = self.owner
        return self._closed or (isinstance(owner, (driver.DeviceBuffer, Tensor)) and owner.closed)

    def close(self) -> None:
        """Free the buffer if this tensor allocated it (views of it become closed too)."""
        self._closed = True
        if self._owns_buffer:
            self.owner.close()

    def __enter__(self) -> Tensor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr={self._ptr:#x}, alignment={self.alignment}"
        return (f"Tensor(shape={self.shape}, strides={self.strides}, dtype={self.dtype.name}, "
                f"device={self.device}, {state})")


def _dtype_from_typestr(typestr: str, explicit: dtypes.DType | None) -> dtypes.DType:
    if typestr[1:] in _RAW_2BYTE and typestr[:1] in "<|":
        if explicit is not dtypes.BFLOAT16:
            raise ValueError(f"typestr {typestr!r} is raw 2-byte data: pass dtype='bfloat16' to read it as "
                             "bfloat16 (PyTorch cannot export bfloat16: pass t.view(torch.int16))")
        return dtypes.BFLOAT16
    native = dtypes.from_typestr(typestr)
    if explicit is not None and explicit is not native:
        raise ValueError(f"array typestr {typestr!r} is {native.name}, but dtype={explicit.name!r} was given")
    return native


def _element_strides(byte_strides, dt: dtypes.DType) -> tuple[int, ...]:
    strides = []
    for dim, stride in enumerate(byte_strides):
        stride = _int(stride, "stride")
        if stride % dt.itemsize:
            raise ValueError(f"stride {stride} bytes of dimension {dim} is not a multiple of the "
                             f"{dt.itemsize}-byte {dt.name} element")
        strides.append(stride // dt.itemsize)
    return tuple(strides)


def _pointer_device(ptr: int) -> int | None:
    """The device owning ``ptr``; None without a driver (nothing to ask) or for unknown memory."""
    try:
        return driver.pointer_device(ptr)
    except errors.NoDriverError:
        return None


def _check_stream(stream) -> None:
    """The protocol's CUDA stream values: None, -1 (no synchronization), 1 (the legacy default stream),
    2 (the per-thread default stream) or a stream handle above 2; 0 is ambiguous and refused."""
    if stream is None:
        return
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"stream must be an int or None, got {type(stream).__name__} {stream!r}")
    if stream == 0 or stream < -1:
        raise ValueError(f"stream {stream} is not a DLPack CUDA stream; allowed: None, -1, 1, 2 or a stream handle")


def _versioned(max_version) -> bool:
    """Whether a consumer asking for ``max_version`` gets a versioned capsule."""
    if max_version is None:
        return False
    try:
        major, minor = (_int(v, "max_version entry") for v in max_version)
    except (TypeError, ValueError):
        raise TypeError(f"max_version must be None or a (major, minor) pair of ints, got {max_version!r}") from None
    return major >= dlpack.VERSION[0]

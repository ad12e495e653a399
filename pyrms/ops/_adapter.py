"""One reader for every kind of array operand: a pointer, shape, element strides, dtype and device,
read straight from the object, with no pyrms.Tensor built and no driver query on the hot path.

Kinds, in the order they are tried:
- ``pyrms.Tensor``: its own attributes.
- PyTorch tensors, recognised by type (torch is never imported here): ``data_ptr()``, ``shape``,
  ``stride()``, ``dtype``, ``device``. Cheaper than torch's ``__cuda_array_interface__``, which
  builds a dict on every access, refuses tensors that require grad, and cannot name bfloat16.
- ``__cuda_array_interface__`` (versions 2 and 3): the dict's data, shape, strides and typestr.
  Raw 2-byte typestrs ('<i2', '<u2', '<V2') are bfloat16 only when the dtype says so, or when the
  object also speaks DLPack, which names bfloat16.
- DLPack (``__dlpack__``): the DLTensor behind a versioned (1.x) capsule, or a legacy one from producers
  that make no other, read in place (``pyrms.dlpack.describe``: ctypes over the producer's structure,
  never written) while the capsule lives; the capsule is not consumed, so its destructor returns it to
  the producer. A versioned array its producer marks read-only is refused where the op writes.

Quantized operands (``read(..., quantized=True)``: the quantizing ops' ``out``) hold float8_e4m3fn,
float8_e5m2 or int8 instead, and nothing else; 1-byte storage that names no quantized dtype (torch.uint8,
CAI '|u1', '<V1', '<f1', DLPack uint8) holds what the caller's hint says. Every other operand keeps
refusing 1-byte dtypes, with the messages it always had.

The device: a Tensor's, torch's and DLPack's own; for CAI objects the driver is asked only where more
than one device exists (with one, every device pointer is on it), so a single-GPU process pays no query.
"""
from __future__ import annotations

from typing import NamedTuple

from .. import dlpack, driver, dtypes, errors
from ..tensor import Tensor, contiguous_strides


class View(NamedTuple):
    """An operand as the ops see it; ``device`` None where nothing says (raw pointers)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    dtype: dtypes.DType | dtypes.QuantDType | None
    device: int | None


_TORCH_DTYPES = {"torch.bfloat16": dtypes.BFLOAT16, "torch.float16": dtypes.FLOAT16, "torch.float32": dtypes.FLOAT32}
_RAW_2BYTE = ("i2", "u2", "V2")
_NEEDS_DLPACK = object()  # a CAI typestr that only DLPack can name
_STORAGE = object()  # 1-byte storage that names no quantized dtype: the caller's hint names it
# uint8: vLLM keeps fp8 KV caches as torch.uint8, and torch's own __cuda_array_interface__ cannot export fp8.
_TORCH_QUANTIZED = {"torch.float8_e4m3fn": dtypes.FLOAT8_E4M3FN, "torch.float8_e5m2": dtypes.FLOAT8_E5M2,
                    "torch.int8": dtypes.INT8, "torch.uint8": _STORAGE}
_QUANTIZED_NAMES = "float8_e4m3fn, float8_e5m2, int8"


def bad_kind(name: str, value) -> TypeError:
    shown = repr(value) if value is None or isinstance(value, bool) else type(value).__name__
    return TypeError(f"{name} must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
                     f"__cuda_array_interface__ or __dlpack__, got {shown}")


def read(name: str, value, hint, *, written: bool = False, quantized: bool = False) -> View:
    """The View of array operand ``value``; ``hint`` is the dtype the caller gave (or None);
    ``written``: the op writes into it; ``quantized``: it holds 8-bit quantized values (see the module's
    docstring), ``hint`` a QuantDType or None. TypeError/ValueError name the operand and what to do."""
    kind = type(value)
    if kind is Tensor and not quantized:  # the common case inline (_tensor): one call fewer per operand
        return View(value.ptr, value.shape, value.strides, value.dtype, value.device)
    if kind is Tensor:
        return _tensor(name, value, quantized)
    if kind.__module__.startswith("torch") and hasattr(value, "data_ptr"):
        return _torch(name, value, hint, written, quantized)
    interface = _interface(name, value)
    if interface is not None:
        view = _from_interface(name, interface, hint, quantized)
        if view.dtype is _NEEDS_DLPACK and hasattr(value, "__dlpack__"):
            return _dlpack(name, value, hint, written, quantized)
        if view.dtype is _NEEDS_DLPACK:
            typestr = interface["typestr"]
            if quantized:
                raise _unnamed_storage(name, f"typestr {typestr!r}")
            raise ValueError(f"{name} has 2-byte storage (typestr {typestr!r}) without a float type: "
                             f"pass dtype='bfloat16' if it holds bfloat16")
        return view
    if hasattr(value, "__dlpack__"):
        return _dlpack(name, value, hint, written, quantized)
    if isinstance(value, Tensor):  # a subclass
        return _tensor(name, value, quantized)
    raise bad_kind(name, value)


def is_array(value) -> bool:
    """Whether read() takes ``value`` for an array (by its kind: read() may still refuse what it holds), so
    that an argument that is also a number or a pointer keeps its own messages for anything else."""
    if isinstance(value, Tensor) or (type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")):
        return True
    for attribute in ("__cuda_array_interface__", "__dlpack__"):
        try:
            getattr(value, attribute)
        except AttributeError:
            continue
        except Exception:  # noqa: BLE001 - a getter that refuses (torch's requires_grad): read() says so
            return True
        return True
    return False


def _unnamed_storage(name: str, what: str) -> ValueError:
    return ValueError(f"{name} has 1-byte storage ({what}) that names no quantized dtype: pass out_dtype= "
                      f"(one of {_QUANTIZED_NAMES}) to say what it holds")


def _tensor(name: str, t: Tensor, quantized: bool) -> View:
    if quantized:  # a pyrms.Tensor holds the rows' dtypes only
        raise ValueError(f"{name} is a pyrms.Tensor of {t.dtype.name}; allowed: {_QUANTIZED_NAMES} (a torch tensor, "
                         f"or any __cuda_array_interface__ or DLPack array of them)")
    return View(t.ptr, t.shape, t.strides, t.dtype, t.device)


def _interface(name: str, value):
    """The CAI dict, or None when the object has none; a getter that raises becomes our TypeError."""
    try:
        interface = value.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as exc:  # noqa: BLE001 - a producer's own refusal (e.g. torch's requires_grad)
        raise TypeError(f"{name}: its __cuda_array_interface__ failed: {exc}") from None
    if not isinstance(interface, dict):
        raise TypeError(f"{name}: __cuda_array_interface__ must be a dict, got {type(interface).__name__}")
    return interface


def _torch(name: str, t, hint, written: bool, quantized: bool) -> View:
    device = t.device
    if device.type != "cuda":
        raise ValueError(f"{name} is a torch tensor on {device}; pyrms needs CUDA memory (use .cuda())")
    if written and t.requires_grad:
        raise ValueError(f"{name} requires grad and pyrms would write into it behind autograd's back: "
                         f"pass {name}.detach(), or use pyrms.torch for autograd")
    if quantized:
        dt = _torch_dtype(t.dtype, _TORCH_QUANTIZED)
        if dt is _STORAGE:
            dt = hint
            if dt is None:
                raise _unnamed_storage(name, "torch.uint8")
        elif dt is None:
            raise ValueError(f"{name} has dtype {t.dtype}; allowed: torch.float8_e4m3fn, torch.float8_e5m2, "
                             f"torch.int8, or torch.uint8 storage with out_dtype")
    else:
        dt = _torch_dtype(t.dtype, _TORCH_DTYPES)
        if (dt is None and hint is not None and hint.itemsize == 2 and t.element_size() == 2
                and not t.is_floating_point()):
            dt = hint  # 2-byte integer views of bfloat16 (t.view(torch.int16)), read as the dtype given
        if dt is None:
            raise ValueError(f"{name} has dtype {t.dtype}; allowed: torch.bfloat16, torch.float16, torch.float32")
    return View(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dt, device.index)


_torch_names_seen: dict = {}  # torch dtype object -> its str(), which costs a microsecond


def _torch_dtype(dtype, table: dict):
    """A torch dtype's entry in `table` (_TORCH_DTYPES or _TORCH_QUANTIZED), or None."""
    try:
        name = _torch_names_seen[dtype]
    except KeyError:
        name = _torch_names_seen[dtype] = str(dtype)
    return table.get(name)


def _from_interface(name: str, interface: dict, hint, quantized: bool) -> View:
    try:
        ptr = interface["data"][0]
        shape = tuple(interface["shape"])
        typestr = interface["typestr"]
    except (KeyError, TypeError, IndexError):
        raise ValueError(f"{name}: __cuda_array_interface__ needs 'data' (ptr, readonly), 'shape' and 'typestr', "
                         f"got keys {sorted(interface)}") from None
    if interface.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    if type(ptr) is not int:
        raise TypeError(f"{name}: data pointer must be an int, got {type(ptr).__name__} {ptr!r}")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{name}: shape entries must be ints >= 0, got {shape!r}")
    if not isinstance(typestr, str):
        raise TypeError(f"{name}: typestr must be a string, got {typestr!r}")
    raw_itemsize = 1 if quantized else 2  # storage that names no dtype of its kind: the hint, or DLPack, names it
    try:
        if quantized:
            dt = dtypes.quantized_from_typestr(typestr)
            if dt is None:
                dt = hint if hint is not None else _NEEDS_DLPACK
        elif typestr[1:] in _RAW_2BYTE:
            dt = hint if hint is not None and hint.itemsize == 2 else _NEEDS_DLPACK
        else:
            dt = dtypes.from_typestr(typestr)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    byte_strides = interface.get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    else:
        strides = _element_strides(name, tuple(byte_strides), shape,
                                   raw_itemsize if dt is _NEEDS_DLPACK else dt.itemsize,
                                   f"{raw_itemsize}-byte" if dt is _NEEDS_DLPACK else f"{dt.itemsize}-byte {dt.name}")
    return View(ptr, shape, strides, dt, _pointer_device(ptr))


def _element_strides(name, byte_strides, shape, itemsize, element) -> tuple[int, ...]:
    if len(byte_strides) != len(shape) or not all(type(b) is int for b in byte_strides):
        raise ValueError(f"{name}: strides {byte_strides!r} must be ints, one per dimension of shape {shape}")
    for dim, b in enumerate(byte_strides):
        if b % itemsize:
            raise ValueError(f"{name}: stride {b} bytes of dimension {dim} is not a multiple of the {element} element")
    strides = tuple(b // itemsize for b in byte_strides)
    if min(strides, default=0) < 0:
        raise ValueError(f"{name}: strides entries must be >= 0, got {strides}")
    return strides


def _pointer_device(ptr: int) -> int | None:
    try:
        if not ptr or driver.device_count() < 2:
            return None
    except errors.NoDriverError:  # reported by the launch, after every argument is checked
        return None
    return driver.pointer_device(ptr)


# --- DLPack ------------------------------------------------------------------------------------------

_DL_CUDA_DEVICES = (dlpack.DeviceType.CUDA, dlpack.DeviceType.CUDA_HOST, dlpack.DeviceType.CUDA_MANAGED)
# kDLFloat8_e4m3fn (10), kDLFloat8_e5m2 (12), kDLInt (0), and kDLUInt (1): uint8 storage; all 8 bits.
_DL_QUANTIZED = {(10, 8): dtypes.FLOAT8_E4M3FN, (12, 8): dtypes.FLOAT8_E5M2, (0, 8): dtypes.INT8, (1, 8): _STORAGE}


def _capsule(name: str, value):
    """The producer's capsule: versioned where it can make one, legacy otherwise (producers older than
    the max_version argument, or than the stream one, refuse the keyword: TypeError)."""
    try:
        device_type = value.__dlpack_device__()[0]
    except Exception:  # noqa: BLE001 - no device query: the capsule says
        device_type = None
    if device_type is not None and int(device_type) not in _DL_CUDA_DEVICES:
        raise TypeError(f"{name} is {type(value).__name__} memory of DLPack device type {int(device_type)} "
                        f"(1 is the host); pyrms needs CUDA memory: copy it to the GPU first")
    # stream -1: the consumer orders its own work, so the producer synchronizes nothing.
    for kwargs in ({"stream": -1, "max_version": dlpack.VERSION}, {"stream": -1}, {}):
        try:
            return value.__dlpack__(**kwargs)
        except TypeError as exc:
            refusal = exc
        except Exception as exc:  # noqa: BLE001 - the producer's refusal, as our error
            refusal = exc
            break
    raise TypeError(f"{name}: its __dlpack__ failed: {refusal}") from None


def _dlpack(name: str, value, hint, written: bool, quantized: bool) -> View:
    capsule = _capsule(name, value)
    try:
        described, problem = dlpack.describe(capsule), None
    except (TypeError, ValueError) as exc:
        problem = type(exc), str(exc)  # not the exception: its traceback would keep the capsule alive
    # Dropped before any error is raised: a producer's ctypes destructor (pyrms's own) cannot run while
    # an exception is propagating (pyrms/dlpack.py says why).
    del capsule
    if problem is not None:
        raise problem[0](f"{name}: {problem[1]}")
    if described.device_type not in _DL_CUDA_DEVICES:
        raise ValueError(f"{name} is DLPack memory of device type {described.device_type}; pyrms needs CUDA memory")
    if written and described.flags & dlpack.READ_ONLY:
        raise ValueError(f"{name} is a read-only DLPack array (its producer's flag) and pyrms would write into it")
    code, bits, lanes = described.code, described.bits, described.lanes
    dt = (_DL_QUANTIZED if quantized else dlpack.DTYPES).get((code, bits))
    if dt is _STORAGE and lanes == 1:
        dt = hint
        if dt is None:
            raise _unnamed_storage(name, "DLPack uint8")
    if dt is None or dt is _STORAGE or lanes != 1:
        allowed = ("float8_e4m3fn (code 10), float8_e5m2 (code 12), int8 (code 0), 8 bits, or uint8 storage "
                   "(code 1) with out_dtype" if quantized else "bfloat16, float16, float32")
        raise ValueError(f"{name} has DLPack dtype code {code}, {bits} bits, {lanes} lanes; allowed: {allowed}")
    shape = described.shape
    strides = contiguous_strides(shape) if described.strides is None else described.strides
    device = described.device_id if described.device_type == dlpack.DeviceType.CUDA else None
    return View(described.ptr, shape, strides, dt, device)

"""DLPack without a GPU: pyrms.Tensor's export over made-up addresses, read back field by field with
ctypes and through pyrms's own operand reader (versioned and legacy capsules), the lifetime of what a
capsule holds (the deleter runs exactly once, whoever calls it, and keeps the tensor and its buffer alive
until then), and the arguments the protocol defines."""
import ctypes
import gc
import sys
import weakref

import pytest

from pyrms import dlpack, dtypes
from pyrms.ops import _adapter
from pyrms.tensor import Tensor

BASE = 0x7F0000001000

_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", ctypes.pythonapi))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_USED_NAMES = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}


def managed_of(capsule):
    """The structure behind a capsule, by its name, read as a C consumer would."""
    name = _get_name(capsule)
    kind = dlpack.DLManagedTensorVersioned if name == b"dltensor_versioned" else dlpack.DLManagedTensor
    return kind.from_address(_get_pointer(capsule, name))


def consume(capsule):
    """What a C consumer does: take the structure and rename the capsule, so that its destructor leaves
    the structure alone; the consumer now owes the deleter call. Returns (structure address, deleter)."""
    managed = managed_of(capsule)
    _set_name(capsule, _USED_NAMES[_get_name(capsule)])
    return ctypes.addressof(managed), ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)


@pytest.fixture
def exports():
    """How many exports the test has left unreleased (not counting those other tests' objects still hold)."""
    before = dlpack.live_exports()
    return lambda: dlpack.live_exports() - before


class DLPackOnly:
    """An object that speaks DLPack only, over a pyrms Tensor: what pyrms's operand reader sees of a foreign
    producer. ``legacy``: a ``__dlpack__`` from before max_version, which refuses the keyword."""

    def __init__(self, tensor, legacy=False):
        self.tensor, self.legacy, self.calls = tensor, legacy, []

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if self.legacy and "max_version" in kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.tensor.__dlpack__(**kwargs)


@pytest.mark.parametrize("max_version, name", [((1, 0), b"dltensor_versioned"), ((1, 3), b"dltensor_versioned"),
                                               ((2, 0), b"dltensor_versioned"), (None, b"dltensor"),
                                               ((0, 8), b"dltensor")])
def test_the_consumers_max_version_picks_the_capsule(max_version, name):
    capsule = Tensor(BASE, (4,), "fp16", device=0).__dlpack__(max_version=max_version)
    assert _get_name(capsule) == name
    managed = managed_of(capsule)
    if name == b"dltensor_versioned":
        assert (managed.version.major, managed.version.minor) == (1, 0)
        assert managed.flags == 0  # writable, not a copy


@pytest.mark.parametrize("dtype, code, bits", [("bfloat16", 4, 16), ("float16", 2, 16), ("float32", 2, 32)])
@pytest.mark.parametrize("max_version", [(1, 0), None])
def test_capsule_fields_describe_the_tensor(dtype, code, bits, max_version):
    t = Tensor(BASE, (6, 10), dtype, device=3).row_view(4, 7, 12, offset=3)  # strided, misaligned for fp32
    capsule = t.__dlpack__(max_version=max_version)  # held: the structure lives as long as the capsule
    managed = managed_of(capsule)
    dl = managed.dl_tensor
    assert (dl.data, dl.byte_offset) == (t.ptr, 0)
    assert (dl.device.device_type, dl.device.device_id) == (2, 3)  # kDLCUDA, the ordinal
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (code, bits, 1)
    assert dl.ndim == 2 and [dl.shape[i] for i in range(2)] == [4, 7] and [dl.strides[i] for i in range(2)] == [12, 1]
    assert managed.deleter


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_round_trip_through_pyrms_reader(dtype, legacy, exports):
    t = Tensor(BASE, (2, 6, 10), dtype, device=1).view(5, (2, 3, 7), (60, 10, 1))
    producer = DLPackOnly(t, legacy)
    view = _adapter.read("x", producer, None)
    assert view == _adapter.View(t.ptr, (2, 3, 7), (60, 10, 1), dtypes.get(dtype), 1)
    # Asked for a versioned capsule, with no synchronization (stream -1); a legacy producer is asked again.
    assert producer.calls[0] == {"stream": -1, "max_version": (1, 0)}
    assert producer.calls[1:] == ([{"stream": -1}] if legacy else [])
    assert exports() == 0  # the reader does not consume: the capsule's destructor released it


def test_zero_dimensional_and_empty_tensors_export():
    for t in (Tensor(BASE, (), "fp32", device=0), Tensor(0, (0, 5), "bf16", device=0)):
        assert _adapter.read("x", DLPackOnly(t), None) == _adapter.View(t.ptr, t.shape, t.strides, t.dtype, 0)


def test_an_unconsumed_capsule_releases_the_tensor_once_it_is_gone(monkeypatch):
    released = []
    counting = CountingDict(released)
    monkeypatch.setattr(dlpack, "_live", counting)
    t = Tensor(BASE, (8,), "bf16", device=0)
    before = sys.getrefcount(t)
    capsule = t.__dlpack__(max_version=(1, 0))
    assert sys.getrefcount(t) == before + 1 and len(counting) == 1
    del capsule
    assert sys.getrefcount(t) == before and len(counting) == 0
    assert released == [True]


def test_a_consumed_capsule_leaves_the_deleter_to_the_consumer(monkeypatch):
    for max_version in ((1, 0), None):
        released = []
        monkeypatch.setattr(dlpack, "_live", CountingDict(released))
        t = Tensor(BASE, (8,), "fp16", device=0)
        before = sys.getrefcount(t)
        capsule = t.__dlpack__(max_version=max_version)
        address, deleter = consume(capsule)
        del capsule  # renamed: its destructor must not release what the consumer still holds
        assert released == [] and sys.getrefcount(t) == before + 1
        deleter(address)  # the consumer is done
        assert released == [True] and sys.getrefcount(t) == before
        deleter(address)  # a consumer calling it twice finds nothing left to free
        assert released == [True, False]


class CountingDict(dict):
    """The table of live exports, recording each release: True when it freed an entry, False when none."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def pop(self, key, *default):
        self.log.append(key in self)
        return super().pop(key, *default)


def test_the_export_keeps_the_tensor_and_its_buffer_alive(fake):
    t = Tensor.empty((16,), "bf16")
    ptr, alive = t.ptr, weakref.ref(t)
    capsule = t.__dlpack__(max_version=(1, 0))
    del t
    gc.collect()
    assert alive() is not None and "cuMemFree" not in fake.names()  # the consumer may still read it
    del capsule
    gc.collect()
    assert alive() is None and ("cuMemFree", (ptr,)) in fake.calls


def test_dlpack_device():
    assert Tensor(BASE, (1,), "fp32", device=5).__dlpack_device__() == (dlpack.DeviceType.CUDA, 5) == (2, 5)
    with pytest.raises(BufferError, match="the device of the memory at 0x7f0000001000 is unknown: build the Tensor "
                                          "with device="):
        Tensor(BASE, (1,), "fp32").__dlpack_device__()  # no driver here, or one that does not know the address


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(dl_device=(1, 0)), BufferError, r"dl_device \(1, 0\) is not this tensor's device \(2, 0\)"),
    (dict(dl_device=(2, 1)), BufferError, r"dl_device \(2, 1\) is not this tensor's device \(2, 0\)"),
    (dict(copy=True), BufferError, "copy=True: pyrms exports its memory in place; allowed: copy=None or False"),
    (dict(stream=0), ValueError, "stream 0 is not a DLPack CUDA stream; allowed: None, -1, 1, 2 or a stream handle"),
    (dict(stream=-2), ValueError, "stream -2 is not a DLPack CUDA stream"),
    (dict(stream="1"), TypeError, "stream must be an int or None, got str '1'"),
    (dict(stream=True), TypeError, "stream must be an int or None, got bool True"),
    (dict(max_version=1), TypeError, r"max_version must be None or a \(major, minor\) pair of ints, got 1"),
    (dict(max_version=(1, 0.5)), TypeError, r"max_version must be None or a \(major, minor\) pair of ints"),
])
def test_protocol_arguments_are_checked(kwargs, error, message, exports):
    t = Tensor(BASE, (4,), "fp16", device=0)
    with pytest.raises(error, match=message):
        t.__dlpack__(**kwargs)
    assert exports() == 0


def test_protocol_arguments_that_are_accepted():
    t = Tensor(BASE, (4,), "fp16", device=0)
    for kwargs in (dict(stream=None), dict(stream=-1), dict(stream=1), dict(stream=2), dict(stream=0x5A5A00),
                   dict(dl_device=(2, 0)), dict(dl_device=(dlpack.DeviceType.CUDA, 0)), dict(copy=False)):
        assert _get_name(t.__dlpack__(max_version=(1, 0), **kwargs)) == b"dltensor_versioned", kwargs


def test_a_closed_tensor_exports_nothing():
    t = Tensor(BASE, (4,), "fp16", device=0)
    t.close()
    with pytest.raises(ValueError, match="tensor is closed"):
        t.__dlpack__()


class Flagged(DLPackOnly):
    """A producer whose versioned capsule carries other flags or another version (set in the structure)."""

    def __init__(self, tensor, flags=0, major=1):
        super().__init__(tensor)
        self.flags, self.major = flags, major

    def __dlpack__(self, **kwargs):
        capsule = super().__dlpack__(**kwargs)
        managed = managed_of(capsule)
        managed.flags, managed.version.major = self.flags, self.major
        return capsule


def test_read_only_arrays_are_read_but_not_written(exports):
    t = Tensor(BASE, (4, 64), "bf16", device=0)
    assert _adapter.read("weight", Flagged(t, flags=dlpack.READ_ONLY), None).ptr == BASE
    with pytest.raises(ValueError, match="out is a read-only DLPack array"):
        _adapter.read("out", Flagged(t, flags=dlpack.READ_ONLY), None, written=True)
    assert _adapter.read("out", Flagged(t, flags=dlpack.IS_COPIED), None, written=True).ptr == BASE
    assert exports() == 0


def test_other_major_versions_and_consumed_capsules_are_refused(exports):
    t = Tensor(BASE, (4,), "fp16", device=0)
    with pytest.raises(ValueError, match=r"x: DLPack version 2\.0; pyrms reads version 1\.x"):
        _adapter.read("x", Flagged(t, major=2), None)

    class Used(DLPackOnly):
        def __dlpack__(self, **kwargs):
            capsule = super().__dlpack__(**kwargs)
            self.taken = consume(capsule)
            return capsule

    used = Used(t)
    with pytest.raises(TypeError, match="x: PyCapsule is not a 'dltensor_versioned' or 'dltensor' capsule"):
        _adapter.read("x", used, None)
    address, deleter = used.taken
    deleter(address)
    assert exports() == 0


def test_refusals_leave_no_unraisable_error(monkeypatch, exports):
    """pyrms's capsules have ctypes destructors, which break an exception propagating while they run: the
    reader drops every capsule before it raises, so the caller gets the reader's own error."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    t = Tensor(BASE, (4, 64), "bf16", device=0)
    for producer, error, message in (
            (Flagged(t, major=2), ValueError, "x: DLPack version 2.0"),  # refused while reading the capsule
            (DLPackOnly(t), ValueError, "x has DLPack dtype code 4, 16 bits, 1 lanes; allowed: float8_e4m3fn")):
        with pytest.raises(error, match=message):
            _adapter.read("x", producer, None, quantized=True)
    assert unraisable == [] and exports() == 0

"""The operand reader and the array layouts, on the CPU: what each kind of array turns into (pointer,
shape, element strides, dtype, device), how leading dimensions collapse into rows, and what the ops
infer from arrays. No memory is touched: the arrays describe made-up addresses."""
import ctypes

import numpy as np
import pytest

from hostile_cases import FakeArray, TorchLikeTensor
from pyrms import dtypes
from pyrms.ops import _adapter
from pyrms.ops import _operands as check

A = 0x7F0000000000


def view(shape, strides, dt=dtypes.BFLOAT16):
    return _adapter.View(A, shape, strides, dt, None)


@pytest.mark.parametrize("shape, strides, expected", [
    ((4, 64), (64, 1), (4, 64, 64)),
    ((2, 5, 64), (320, 64, 1), (10, 64, 64)),           # [batch, seq, hidden], contiguous
    ((2, 5, 64), (1000, 200, 1), (10, 64, 200)),        # row slices of a wider tensor: one row stride 200
    ((1, 7, 1, 64), (9999, 70, 5, 1), (7, 64, 70)),     # size-1 dimensions say nothing
    ((64,), (1,), (1, 64, 64)),
    ((3, 0, 64), (64, 64, 1), (0, 64, 64)),             # an empty batch
])
def test_leading_dimensions_collapse_to_one_row_stride(shape, strides, expected):
    assert check.collapse("x", view(shape, strides)) == expected


@pytest.mark.parametrize("shape, strides, message", [
    ((2, 5, 64), (512, 64, 1), "do not collapse to one row stride; pass x.contiguous()"),   # a gap between batches
    ((64, 4), (1, 64), "contiguous along the hidden dimension"),                         # transposed
    ((), (), "0-dimensional"),
])
def test_layouts_that_do_not_collapse_are_refused(shape, strides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check.collapse("x", view(shape, strides))


def test_cuda_array_interface_strides_become_elements():
    v = _adapter.read("x", FakeArray(A, (4, 64), typestr="<f2", strides=(260, 2)), None)
    assert (v.ptr, v.shape, v.strides, v.dtype) == (A, (4, 64), (130, 1), dtypes.FLOAT16)
    raw = FakeArray(A, (4, 64), typestr="<V2")
    assert _adapter.read("x", raw, dtypes.BFLOAT16).dtype is dtypes.BFLOAT16  # 2-byte storage, named by the caller
    with pytest.raises(ValueError, match="2-byte storage"):
        _adapter.read("x", raw, None)


def test_torch_tensors_are_read_by_their_attributes():
    t = TorchLikeTensor(A, (2, 3, 64), dtype="torch.bfloat16", device=("cuda", 1), strides=(300, 100, 1))
    assert _adapter.read("x", t, None) == _adapter.View(A, (2, 3, 64), (300, 100, 1), dtypes.BFLOAT16, 1)
    grad = TorchLikeTensor(A, (64,), requires_grad=True)
    assert _adapter.read("weight", grad, None).ptr == A           # read: a parameter as it is
    with pytest.raises(ValueError, match=r"pass out.detach\(\)"):
        _adapter.read("out", grad, None, written=True)            # written: refused


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _adapter._DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackProducer:
    """A CUDA DLPack producer made with ctypes: a 'dltensor' capsule over a DLManagedTensor we own."""

    def __init__(self, shape, strides, code, bits, device_type=2, device_id=0, byte_offset=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides)
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.ndim, t.byte_offset = A, len(shape), byte_offset
        t.device.device_type, t.device.device_id = device_type, device_id
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))

    def __dlpack_device__(self):
        return (self.managed.dl_tensor.device.device_type, self.managed.dl_tensor.device.device_id)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_dlpack_capsules_are_read_in_place():
    v = _adapter.read("x", DLPackProducer((3, 64), (100, 1), code=4, bits=16, device_id=2, byte_offset=6), None)
    assert v == _adapter.View(A + 6, (3, 64), (100, 1), dtypes.BFLOAT16, 2)  # bfloat16, which CAI cannot name
    with pytest.raises(ValueError, match="DLPack dtype code 0, 8 bits"):
        _adapter.read("x", DLPackProducer((64,), (1,), code=0, bits=8), None)
    with pytest.raises(TypeError, match="DLPack device type 1"):
        _adapter.read("x", np.zeros(4, np.float16), None)          # host memory, refused by its device


def test_sizes_are_inferred_from_arrays_and_checked_when_given(monkeypatch):
    monkeypatch.setattr(check.driver, "selected_device", lambda: type("Device", (), {"ordinal": 0})())
    x = TorchLikeTensor(A, (2, 3, 64), dtype="torch.float16")
    w = TorchLikeTensor(A + (1 << 20), (64,), dtype="torch.float16")
    dt, rows, hidden, found = check.arrays(None, None, None, rows=[("input", x, None, "input_stride", False),
                                                                    ("out", A + (2 << 20), None, "out_stride", True)],
                                           vectors=[("weight", w)])
    assert (dt, rows, hidden) == (dtypes.FLOAT16, 6, 64)
    assert found == {"input": (A, 64), "out": (A + (2 << 20), None), "weight": (A + (1 << 20), 64)}
    with pytest.raises(ValueError, match=r"input has shape \(2, 3, 64\), expected \(5, 64\)"):
        check.arrays(None, 5, None, rows=[("input", x, None, "input_stride", False)], vectors=[])
    with pytest.raises(ValueError, match="input_stride=70 disagrees with input's row stride 64"):
        check.arrays(None, None, None, rows=[("input", x, 70, "input_stride", False)], vectors=[])
    on_one = TorchLikeTensor(A, (2, 3, 64), dtype="torch.float16", device=("cuda", 1))
    with pytest.raises(ValueError, match="input is on device 1, but the launch runs on device 0"):
        check.arrays(None, None, None, rows=[("input", on_one, None, "input_stride", False)], vectors=[])
    with pytest.raises(TypeError, match="num_tokens and hidden_size are required"):
        check.arrays(None, None, None, rows=[("input", A, None, "input_stride", False)], vectors=[])

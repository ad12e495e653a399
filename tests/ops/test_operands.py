"""The operand reader and the array layouts, on the CPU: what each kind of array turns into (pointer,
shape, element strides, dtype, device), how leading dimensions collapse into rows, and what the ops
infer from arrays. No memory is touched: the arrays describe made-up addresses."""
import ctypes

import numpy as np
import pytest

from tests.support.hostile_cases import FakeArray, TorchLikeTensor
from pyrms import dlpack, dtypes
from pyrms.ops import _adapter
from pyrms.ops import _operands as check
from pyrms.ops.rms_norm_quant import arrays as _quant_arrays
from pyrms.tensor import Tensor

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


class DLPackProducer:
    """A CUDA DLPack producer of the legacy protocol, made with ctypes: a 'dltensor' capsule over a
    DLManagedTensor we own, from a ``__dlpack__`` that knows no max_version."""

    def __init__(self, shape, strides, code, bits, device_type=2, device_id=0, byte_offset=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides)
        self.managed = dlpack.DLManagedTensor()
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


# --- quantized operands (the quantizing ops' out) and float32 scales ---------------------------------

Q8 = [("float8_e4m3fn", dtypes.FLOAT8_E4M3FN, 10), ("float8_e5m2", dtypes.FLOAT8_E5M2, 12), ("int8", dtypes.INT8, 0)]


class _BothInterfaces(DLPackProducer):
    """CAI raw 1-byte storage ('<V1', as ml_dtypes names float8_e4m3fn) beside a DLPack capsule that names it."""

    def __init__(self, shape, strides, code, bits):
        super().__init__(shape, strides, code, bits)
        self.__cuda_array_interface__ = dict(shape=shape, typestr="<V1", data=(A, False), strides=None, version=3)


@pytest.mark.parametrize("name, dt, code", Q8)
def test_quantized_dtypes_are_read_only_where_asked(name, dt, code):
    """Each kind names the three quantized dtypes when the operand is quantized, and keeps refusing them, with
    the messages it always had, when it is not (an int8 or fp8 input of any other op)."""
    torch_like = TorchLikeTensor(A, (4, 64), dtype=f"torch.{name}", strides=(80, 1))
    assert _adapter.read("out", torch_like, None, quantized=True) == _adapter.View(A, (4, 64), (80, 1), dt, 0)
    with pytest.raises(ValueError, match=f"x has dtype torch.{name}; allowed: torch.bfloat16, torch.float16, "):
        _adapter.read("x", torch_like, None)
    producer = DLPackProducer((4, 64), (80, 1), code=code, bits=8)
    assert _adapter.read("out", producer, None, quantized=True) == _adapter.View(A, (4, 64), (80, 1), dt, 0)
    with pytest.raises(ValueError, match=f"x has DLPack dtype code {code}, 8 bits, 1 lanes; allowed: bfloat16, "):
        _adapter.read("x", producer, None)
    # the hint never overrides a dtype the array names (the op refuses a disagreement: quantized_out)
    assert _adapter.read("out", torch_like, dtypes.INT8 if dt is not dtypes.INT8 else dtypes.FLOAT8_E5M2,
                         quantized=True).dtype is dt


def test_cuda_array_interface_names_int8_and_leaves_raw_bytes_to_the_hint():
    int8 = FakeArray(A, (4, 64), typestr="|i1", strides=(80, 1))
    assert _adapter.read("out", int8, None, quantized=True) == _adapter.View(A, (4, 64), (80, 1), dtypes.INT8, None)
    with pytest.raises(ValueError, match=r"x: array typestr '\|i1' is not supported; allowed: '<f2' \(float16\)"):
        _adapter.read("x", int8, None)
    for typestr in ("|u1", "<V1", "<f1"):  # raw bytes; ml_dtypes' float8_e4m3fn and float8_e5m2
        raw = FakeArray(A, (64,), typestr=typestr)
        assert _adapter.read("out", raw, dtypes.FLOAT8_E5M2, quantized=True).dtype is dtypes.FLOAT8_E5M2
        with pytest.raises(ValueError, match=f"out has 1-byte storage \\(typestr '{typestr}'\\) that names no "
                                             r"quantized dtype: pass out_dtype= \(one of float8_e4m3fn"):
            _adapter.read("out", raw, None, quantized=True)
    both = _BothInterfaces((64,), (1,), code=10, bits=8)
    assert _adapter.read("out", both, None, quantized=True).dtype is dtypes.FLOAT8_E4M3FN  # DLPack names it
    with pytest.raises(ValueError, match=r"out: array typestr '<f2' is not a quantized output type; allowed: '\|i1'"):
        _adapter.read("out", FakeArray(A, (64,), typestr="<f2"), None, quantized=True)
    strided = FakeArray(A, (4, 64), typestr="|u1", strides=(70, 1))  # bytes are elements
    assert _adapter.read("out", strided, dtypes.INT8, quantized=True).strides == (70, 1)


def test_uint8_storage_holds_what_the_hint_names():
    for value, what in ((TorchLikeTensor(A, (64,), dtype="torch.uint8"), "torch.uint8"),
                        (DLPackProducer((64,), (1,), code=1, bits=8), "DLPack uint8")):
        assert _adapter.read("out", value, dtypes.INT8, quantized=True).dtype is dtypes.INT8
        with pytest.raises(ValueError, match=f"out has 1-byte storage \\({what}\\) that names no quantized dtype"):
            _adapter.read("out", value, None, quantized=True)


@pytest.mark.parametrize("value, message", [
    (TorchLikeTensor(A, (64,), dtype="torch.bfloat16"), "out has dtype torch.bfloat16; allowed: torch.float8_e4m3fn, "
                                                       "torch.float8_e5m2, torch.int8, or torch.uint8 storage with"),
    (DLPackProducer((64,), (1,), code=2, bits=16), "out has DLPack dtype code 2, 16 bits, 1 lanes; allowed: "
                                                   "float8_e4m3fn (code 10), float8_e5m2 (code 12), int8 (code 0)"),
    (DLPackProducer((64,), (1,), code=13, bits=8), "DLPack dtype code 13, 8 bits"),  # float8_e5m2fnuz
    (Tensor(A, (64,), "bfloat16"), "out is a pyrms.Tensor of bfloat16; allowed: float8_e4m3fn, float8_e5m2, int8"),
])
def test_quantized_operands_refuse_every_other_dtype(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _adapter.read("out", value, dtypes.INT8, quantized=True)


def test_is_array_tells_arrays_from_numbers_and_pointers():
    from tests.support.hostile_cases import RefusingInterface

    for value in (Tensor(A, (1,), "float32"), TorchLikeTensor(A, (1,)), FakeArray(A, (1,), typestr="<f4"),
                  DLPackProducer((1,), (1,), code=2, bits=32), RefusingInterface(), np.zeros(1, np.float32)):
        assert _adapter.is_array(value), value
    for value in (0.5, np.float32(0.5), A, None, "0.5", True, [0.5]):
        assert not _adapter.is_array(value), value


def test_quantized_out_is_checked_as_rows_are(monkeypatch):
    """quantized_out: the rows' shape, collapse and stride rules, sizes inferred; its dtype agreeing with
    out_dtype, which it sets where None."""
    monkeypatch.setattr(check.driver, "selected_device", lambda: type("Device", (), {"ordinal": 0})())
    out = TorchLikeTensor(A, (2, 3, 64), dtype="torch.float8_e5m2", strides=(300, 100, 1))
    assert _quant_arrays.quantized_out(out, None, None, None, None) == (A, 100, dtypes.FLOAT8_E5M2, 6, 64)
    assert _quant_arrays.quantized_out(out, 100, "float8_e5m2", 6, 64) == (A, 100, dtypes.FLOAT8_E5M2, 6, 64)
    storage = TorchLikeTensor(A, (1, 64), dtype="torch.uint8")
    # one row: the stride given
    assert _quant_arrays.quantized_out(storage, 70, np.int8, None, None) == (A, 70, dtypes.INT8, 1, 64)
    for args, message in (((out, None, "int8", None, None), "out has dtype float8_e5m2, but out_dtype is int8"),
                          ((out, 64, None, None, None), "out_stride=64 disagrees with out's row stride 100"),
                          ((out, None, None, 5, None), r"out has shape \(2, 3, 64\), expected \(5, 64\)"),
                          ((out, None, "bf16", None, None), "quantized output dtype 'bf16' is not supported")):
        with pytest.raises(ValueError, match=message):
            _quant_arrays.quantized_out(*args)
    on_one = TorchLikeTensor(A, (4, 64), dtype="torch.int8", device=("cuda", 1))
    with pytest.raises(ValueError, match="out is on device 1, but the launch runs on device 0"):
        _quant_arrays.quantized_out(on_one, None, None, None, None)


def f32(shape, strides=None, ptr=A):
    return FakeArray(ptr, shape, typestr="<f4", strides=None if strides is None else tuple(4 * s for s in strides))


@pytest.mark.parametrize("value, num_tokens, groups, column_major, scale_stride, expected", [
    (f32((4, 2)), 4, 2, False, None, 2),
    (f32((4, 2), (5, 1)), 4, 2, False, 5, 5),           # rows padded to 5: S = 5, as given
    (f32((4, 1), (1, 1)), 4, 1, False, None, 1),        # one group: the rows' stride
    (f32((1, 2), (9, 1)), 1, 2, False, None, None),     # one row has no row stride to say: as given
    (f32((4, 2), (1, 4)), 4, 2, True, None, 4),         # (groups, num_tokens) memory seen through .t()
    (f32((4, 2), (1, 8)), 4, 2, True, 8, 8),            # DeepGEMM's tokens padded to a multiple of 4
    (f32((4, 1), (1, 99)), 4, 1, True, None, None),     # one group has no group stride to say
    (f32((1, 2)), 1, 2, True, None, 1),                 # one token: its groups one apart
])
def test_group_scale_arrays_give_their_scale_stride(value, num_tokens, groups, column_major, scale_stride, expected):
    assert _quant_arrays.group_scale_array(value, num_tokens, groups, column_major, scale_stride) == (A, expected)


def test_one_and_per_token_scale_arrays():
    for shape in ((), (1,), (1, 1)):
        assert _quant_arrays.scalar_array("scale", f32(shape)) == A
    assert _quant_arrays.token_scales(f32((4,)), 4) == _quant_arrays.token_scales(f32((4, 1), (1, 7)), 4) == A
    assert _quant_arrays.token_scales(f32((1,), (5,)), 1) == A  # one token: no stride to say

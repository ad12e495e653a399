"""Tensor geometry, views, alignment and __cuda_array_interface__, with no GPU: a Tensor over a raw
pointer touches no driver. The fake base address 0x1000 is 4 KiB-aligned (so the alignments below
are exact) and never mapped, so a driver, where one exists, does not know it either."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import dtypes
from pyrms.tensor import Tensor, contiguous_strides

BASE = 0x1000


class FakeCudaArray:
    """A producer exposing only __cuda_array_interface__, like a CuPy or Numba array would."""

    def __init__(self, **interface):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, "data": (BASE, False), **interface}


@pytest.mark.parametrize("dtype, expected", [
    ("bfloat16", [16, 2, 4, 2, 8, 2, 4, 2]),
    ("float16", [16, 2, 4, 2, 8, 2, 4, 2]),
    ("float32", [16, 4, 8, 4]),
])
def test_views_at_every_element_offset_have_the_right_alignment(dtype, expected):
    parent = Tensor(BASE, (64,), dtype)
    itemsize = parent.dtype.itemsize
    alignments, pointers = [], []
    for offset in range(16 // itemsize):
        view = parent.view(offset, (8,))
        alignments.append(view.alignment)
        pointers.append(view.ptr)
    assert alignments == expected
    assert pointers == [BASE + k * itemsize for k in range(16 // itemsize)]


def test_alignment_and_is_aligned():
    assert Tensor(0x1002, (1,), "bf16").alignment == 2
    assert Tensor(0x100C, (1,), "fp32").alignment == 4
    assert Tensor(0x1008, (1,), "fp32").alignment == 8
    assert Tensor(0x1020, (1,), "fp32").alignment == 16  # capped: 0x1020 is 32-byte aligned
    assert Tensor(0, (0,), "fp32").alignment == 16
    t = Tensor(0x1002, (4,), "fp16")  # 0x1002 = 6 * 683
    assert (t.is_aligned(2), t.is_aligned(4), t.is_aligned(6)) == (True, False, True)
    with pytest.raises(ValueError, match="nbytes must be > 0, got 0"):
        t.is_aligned(0)


def test_geometry_of_a_row_strided_view():
    parent = Tensor(BASE, (1000,), "bf16")
    rows = parent.row_view(num_rows=3, hidden=5, row_stride=13, offset=1)
    assert rows.shape == (3, 5)
    assert rows.strides == (13, 1)
    assert rows.ptr == BASE + 2
    assert rows.numel == 15
    assert rows.span_elements == 2 * 13 + 5
    assert rows.nbytes_span == (2 * 13 + 5) * 2
    assert not rows.is_contiguous
    assert parent.row_view(3, 5, 5).is_contiguous


def test_contiguity_rules():
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides((2, 0, 4)) == (4, 4, 1)
    assert Tensor(BASE, (2, 3), "fp32").strides == (3, 1)
    assert Tensor(BASE, (1, 3), "fp32", strides=(99, 1)).is_contiguous  # a size-1 dimension's stride is free
    assert not Tensor(BASE, (3, 2), "fp32", strides=(1, 3)).is_contiguous
    assert Tensor(BASE, (0, 5), "fp32", strides=(7, 1)).is_contiguous
    assert Tensor(BASE, (0, 5), "fp32").nbytes_span == 0
    assert Tensor(BASE, (), "fp32").numel == 1
    assert Tensor(BASE, (), "fp32").nbytes_span == 4


def test_view_defaults_keep_shape_and_strides():
    parent = Tensor(BASE, (4, 8), "fp16", strides=(10, 1))
    same = parent.view()
    assert (same.shape, same.strides, same.ptr) == ((4, 8), (10, 1), BASE)
    reshaped = parent.view(2, (3, 4))
    assert (reshaped.shape, reshaped.strides, reshaped.ptr) == ((3, 4), (4, 1), BASE + 4)


def test_view_bounds_errors_name_the_values():
    parent = Tensor(BASE, (10,), "fp32")
    assert parent.view(9, (1,)).ptr == BASE + 36
    assert parent.view(10, (0,)).numel == 0
    with pytest.raises(ValueError, match=r"offset 9 with shape \(2,\).*\[9, 11\).*10 elements"):
        parent.view(9, (2,))
    with pytest.raises(ValueError, match=r"offset 11 with shape \(0,\)"):
        parent.view(11, (0,))
    assert parent.row_view(2, 4, 5).span_elements == 9  # fits in 10
    with pytest.raises(ValueError, match=r"offset 0 with shape \(2, 4\) and strides \(5, 1\) covers "
                                         r"elements \[0, 9\), outside the 8 elements"):
        Tensor(BASE, (8,), "fp32").row_view(2, 4, 5)
    with pytest.raises(ValueError, match="view offset must be >= 0, got -1"):
        parent.view(-1, (1,))


def test_nested_views_are_bounded_by_their_parent():
    parent = Tensor(BASE, (16,), "bf16")
    inner = parent.view(4, (8,))
    assert inner.view(7, (1,)).ptr == BASE + 22
    with pytest.raises(ValueError, match=r"offset 7 with shape \(2,\)"):
        inner.view(7, (2,))


def test_constructor_validation_names_the_bad_value():
    with pytest.raises(ValueError, match="ptr must be in"):
        Tensor(-1, (1,), "fp32")
    with pytest.raises(TypeError, match="ptr must be an int, got float 1.5"):
        Tensor(1.5, (1,), "fp32")
    with pytest.raises(ValueError, match=r"shape entries must be >= 0, got \(2, -3\)"):
        Tensor(BASE, (2, -3), "fp32")
    with pytest.raises(ValueError, match=r"strides \(1,\) must have one entry per dimension of shape \(2, 3\)"):
        Tensor(BASE, (2, 3), "fp32", strides=(1,))
    with pytest.raises(ValueError, match=r"strides entries must be >= 0, got \(-3, 1\)"):
        Tensor(BASE, (2, 3), "fp32", strides=(-3, 1))
    with pytest.raises(ValueError, match="dtype 'float64' is not supported"):
        Tensor(BASE, (2,), "float64")
    assert Tensor(BASE, 5, np.float16).shape == (5,)
    assert Tensor(BASE, (2,), ml_dtypes.bfloat16).dtype is dtypes.BFLOAT16


def test_cuda_array_interface_export():
    contiguous = Tensor(BASE + 4, (2, 3), "fp32", device=0)
    assert contiguous.__cuda_array_interface__ == {
        "shape": (2, 3), "typestr": "<f4", "data": (BASE + 4, False), "strides": None, "version": 3}
    strided = Tensor(BASE, (4, 8), "fp16").row_view(3, 5, 9, offset=1)
    assert strided.__cuda_array_interface__ == {
        "shape": (3, 5), "typestr": "<f2", "data": (BASE + 2, False), "strides": (18, 2), "version": 3}


def test_bfloat16_has_no_cuda_array_interface():
    """The interface has no bfloat16 typestr: no attribute at all (consumers probing with hasattr go on to
    DLPack), rather than int16 values that a consumer would compute on without a word."""
    t = Tensor(BASE, (2,), "bf16", device=0)
    assert not hasattr(t, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=r"a bfloat16 Tensor has no __cuda_array_interface__: .* use DLPack"):
        t.__cuda_array_interface__
    with pytest.raises(TypeError, match="a bfloat16 Tensor has no __cuda_array_interface__"):
        Tensor.from_cuda_array(t)


def test_cuda_array_interface_import_converts_byte_strides():
    fake = FakeCudaArray(shape=(3, 5), typestr="<f2", strides=(26, 2), data=(BASE + 6, False))
    t = Tensor.from_cuda_array(fake)
    assert (t.shape, t.strides, t.dtype, t.ptr) == ((3, 5), (13, 1), dtypes.FLOAT16, BASE + 6)
    assert t.owner is fake
    # No driver here (or a driver that does not know the fake address): the device is unknown.
    assert t.device is None
    t = Tensor.from_cuda_array(FakeCudaArray(shape=(4,), typestr="<f4"))
    assert (t.shape, t.strides, t.dtype) == ((4,), (1,), dtypes.FLOAT32)


def test_cuda_array_interface_round_trip():
    for dtype in ("float16", "float32"):
        original = Tensor(BASE, (6, 10), dtype, device=3).row_view(4, 7, 12, offset=3)
        back = Tensor.from_cuda_array(original)
        assert (back.ptr, back.shape, back.strides, back.dtype, back.device) == (
            original.ptr, original.shape, original.strides, original.dtype, 3)
        foreign = FakeCudaArray(**original.__cuda_array_interface__)
        back = Tensor.from_cuda_array(foreign)
        assert (back.ptr, back.shape, back.strides, back.dtype) == (
            original.ptr, original.shape, original.strides, original.dtype)


@pytest.mark.parametrize("typestr", ["<i2", "<u2", "<V2", "|V2"])
def test_raw_two_byte_types_need_an_explicit_bfloat16(typestr):
    fake = FakeCudaArray(shape=(4,), typestr=typestr)
    with pytest.raises(ValueError, match=f"typestr '{typestr}' is raw 2-byte data: pass dtype='bfloat16'"):
        Tensor.from_cuda_array(fake)
    with pytest.raises(ValueError, match="pass dtype='bfloat16'"):
        Tensor.from_cuda_array(fake, dtype="float16")
    assert Tensor.from_cuda_array(fake, dtype="bfloat16").dtype is dtypes.BFLOAT16


def test_cuda_array_interface_import_errors_name_the_value():
    with pytest.raises(ValueError, match="stride 3 bytes of dimension 0 is not a multiple of the 2-byte float16"):
        Tensor.from_cuda_array(FakeCudaArray(shape=(2, 1), typestr="<f2", strides=(3, 2)))
    with pytest.raises(ValueError, match="'<f8' is not supported"):
        Tensor.from_cuda_array(FakeCudaArray(shape=(2,), typestr="<f8"))
    with pytest.raises(ValueError, match="typestr '<f2' is float16, but dtype='float32' was given"):
        Tensor.from_cuda_array(FakeCudaArray(shape=(2,), typestr="<f2"), dtype="float32")
    with pytest.raises(ValueError, match="masked arrays"):
        Tensor.from_cuda_array(FakeCudaArray(shape=(2,), typestr="<f2", mask=object()))
    with pytest.raises(TypeError, match="list does not expose __cuda_array_interface__"):
        Tensor.from_cuda_array([1, 2])


def test_a_closed_tensor_refuses_to_hand_out_its_memory():
    t = Tensor(BASE, (4,), "fp32")
    view = t.view(1, (2,))
    with t:
        assert not t.closed
    assert t.closed
    with pytest.raises(ValueError, match="tensor is closed"):
        t.ptr
    with pytest.raises(ValueError, match="tensor is closed"):
        t.__cuda_array_interface__
    with pytest.raises(ValueError, match="tensor is closed"):
        t.to_numpy()
    assert "closed" in repr(t)
    assert view.ptr == BASE + 4  # a view of non-owned memory is not closed with it

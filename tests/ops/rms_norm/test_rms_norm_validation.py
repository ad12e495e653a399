"""pyrms.rms_norm rejects bad arguments before any launch, naming the argument and what is allowed.

These run without a GPU: every check happens before the driver is touched, and valid arguments
reach the driver, which raises NoDriverError here (or launches, where a GPU exists: those cases
are skipped then, as they would write to made-up addresses).
"""
import math

import pytest

import pyrms
from pyrms import Tensor, driver

A, B, W = 1 << 20, 2 << 20, 3 << 20  # made-up, 16-byte aligned device addresses
NO_GPU = driver.unavailable_reason() is not None


def call(**overrides):
    args = dict(out=A, input=B, weight=W, epsilon=1e-6, num_tokens=4, hidden_size=64)
    args.update(overrides)
    positional = [args.pop(k) for k in ("out", "input", "weight", "epsilon", "num_tokens", "hidden_size")]
    return pyrms.rms_norm(*positional, **args)


class FakeArray:
    """A minimal __cuda_array_interface__ producer (what PyTorch or CuPy expose)."""

    def __init__(self, ptr, shape, typestr="<f2", strides=None):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(ptr, False),
                                             strides=strides, version=3)


BAD = [
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1 and 2147483647, got 0"),
    (dict(num_tokens=-3), ValueError, "num_tokens must be between 1 and 2147483647, got -3"),
    (dict(num_tokens=2**31), ValueError, "num_tokens must be between 1 and 2147483647"),
    (dict(num_tokens=4.0), TypeError, "num_tokens must be an int, got float 4.0"),
    (dict(num_tokens=True), TypeError, "num_tokens must be an int, got bool True"),
    (dict(hidden_size=0), ValueError, "hidden_size must be between 1 and 2147483647, got 0"),
    (dict(hidden_size="64"), TypeError, "hidden_size must be an int, got str '64'"),
    (dict(epsilon=math.nan), ValueError, "epsilon must be finite and >= 0, got nan"),
    (dict(epsilon=math.inf), ValueError, "epsilon must be finite and >= 0, got inf"),
    (dict(epsilon=-1e-6), ValueError, "epsilon must be finite and >= 0, got -1e-06"),
    (dict(epsilon="1e-6"), TypeError, "epsilon must be a float, got str"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(input=-16), ValueError, "input must be a non-null device pointer, got -16"),
    (dict(weight="w"), TypeError, "weight must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object"),
    (dict(weight=None, gemma=True), ValueError, "gemma needs a weight"),
    (dict(weight=W, weight_dtype="float16"), ValueError, "weight dtype must be bfloat16 (the input's) or float32, got float16"),
    (dict(weight=W + 2, weight_dtype="float32"), ValueError, "weight pointer 0x300002 is not aligned to 4 bytes, as float32"),
    (dict(weight=W + 1), ValueError, "weight pointer 0x300001 is not aligned to 2 bytes, as bfloat16 elements must be"),
    (dict(input=B + 2, dtype="float32"), ValueError, "input pointer 0x200002 is not aligned to 4 bytes, as float32"),
    (dict(out=3.5), TypeError, "out must be a device pointer (int), a pyrms.Tensor, a torch tensor, "
                               "or an object with __cuda_array_interface__ or __dlpack__, got float"),
    (dict(dtype="int8"), ValueError, "dtype 'int8' is not supported; allowed: bfloat16, float16, float32"),
    (dict(dtype=3), TypeError, "dtype must be a string, numpy dtype or pyrms DType, got 3"),
    (dict(input_stride=63), ValueError, "input_stride must be >= hidden_size (64) so rows do not overlap, got 63"),
    (dict(out_stride=0), ValueError, "out_stride must be between 1 and 9223372036854775807, got 0"),
    (dict(input_stride=2**62), ValueError, "input spans 4 rows of stride 4611686018427387904: more than 2^59 elements"),
    (dict(out=B + 2), ValueError, "out and input overlap; they must be disjoint or exactly the same memory (in place)"),
    (dict(out=B, out_stride=65), ValueError, "out and input overlap"),
    (dict(weight=A + 64), ValueError, "out and weight overlap; they must be disjoint"),
    (dict(stream="default"), TypeError, "stream must be a pyrms Stream, a raw CUstream handle (int)"),
    (dict(stream=-1), ValueError, "stream handle must be >= 0 and below 2**64, got -1"),
    (dict(rstd=0), ValueError, "rstd must be a non-null, 4-byte aligned device pointer to num_tokens float32"),
    (dict(rstd=W + 2), ValueError, f"4-byte aligned device pointer to num_tokens float32 (or such an array), got {W + 2}"),
    (dict(rstd=A + 64), ValueError, "rstd and out overlap; they must be disjoint"),
    (dict(rstd=W + 124), ValueError, "rstd and weight overlap; they must be disjoint"),
    (dict(rstd=W + 128, weight_stride=64), ValueError, "rstd= is offered for rows one stride apart"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments_raise_before_any_launch(overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)


ARRAY_BAD = [
    (dict(input=FakeArray(B, (4, 65))), "input has shape (4, 65), expected (4, 64)"),
    (dict(out=FakeArray(A, (3, 64))), "out has shape (3, 64), expected (4, 64)"),
    (dict(weight=FakeArray(W, (64, 1))), "weight has shape (64, 1), expected (64,)"),
    (dict(weight=FakeArray(W, (64,), strides=(4,))), "weight must be contiguous, got strides (2,)"),
    (dict(input=FakeArray(B, (4, 64), strides=(256, 4))), "input must be contiguous along the hidden dimension"),
    (dict(input=FakeArray(B, (4, 64), typestr="<f4")), "out has dtype float16, but the dtype is float32 (that of input)"),
    (dict(input=FakeArray(B, (4, 64)), dtype="bfloat16"), "input has dtype float16, but the dtype is bfloat16"),
    (dict(input=FakeArray(B, (4, 64), strides=(256, 2)), input_stride=100), "input_stride=100 disagrees with input's row stride 128"),
    (dict(input=FakeArray(B, (4, 64), typestr="<i2")), "input has 2-byte storage (typestr '<i2') without a float type: pass dtype='bfloat16'"),
    (dict(input=FakeArray(B, (4, 64)), rstd=FakeArray(4 << 20, (4,))), "rstd has dtype float16; rstd's values are float32"),
    (dict(input=FakeArray(B, (4, 64)), rstd=FakeArray(4 << 20, (2, 2), "<f4")),
     "rstd has shape (2, 2); rstd's values are (4,) or (4, 1) float32 (num_tokens)"),
]


@pytest.mark.parametrize("overrides, message", ARRAY_BAD, ids=[str(i) for i in range(len(ARRAY_BAD))])
def test_array_arguments_are_checked_against_the_sizes(overrides, message):
    overrides.setdefault("out", FakeArray(A, (4, 64)))
    overrides.setdefault("weight", FakeArray(W, (64,)))
    with pytest.raises((ValueError, TypeError)) as info:
        call(**overrides)
    assert message in str(info.value)


def test_a_closed_tensor_is_refused():
    t = Tensor(A, (4, 64), "bfloat16")
    t.close()
    with pytest.raises(ValueError, match="closed"):
        call(out=t)


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: valid made-up pointers would be launched on")
@pytest.mark.parametrize("overrides", [
    dict(),
    dict(out=B),                                   # in place
    dict(input_stride=100, out_stride=71),          # strides of any value >= hidden
    dict(input=B + 2, out=A + 14, weight=W + 6),    # any element misalignment
    dict(epsilon=0),                                # an int epsilon is a valid value
    dict(input=Tensor(B, (4, 64), "bfloat16"), out=Tensor(A, (4, 64), "bfloat16"), weight=Tensor(W, (64,), "bfloat16")),
    dict(input=FakeArray(B, (4, 64), typestr="<i2"), dtype="bfloat16"),  # PyTorch bf16 as int16 views
    dict(rstd=W + 128),                             # each row's inv_rms stored there
])
def test_valid_arguments_reach_the_driver(overrides):
    with pytest.raises(pyrms.NoDriverError, match="^no CUDA driver found"):
        call(**overrides)


@pytest.mark.parametrize("weight", [0x30001, 0x30000], ids=["misaligned", "aligned"])
@pytest.mark.parametrize("hidden", [64, 4096])
def test_a_weight_beside_weight_dtype_none_is_refused(fake, names_only, weight, hidden):
    """weight_dtype='none' is the call without a weight: a weight pointer beside it is refused by name, aligned or not
    (a misaligned one once failed an internal assertion), the same on the N-D path; weight 0 launches."""
    with pytest.raises(ValueError, match="weight_dtype='none' is a call without a weight, but weight="):
        pyrms.rms_norm(0x10000, 0x20000, weight, 1e-6, 3, hidden, dtype="bfloat16", weight_dtype="none")
    with pytest.raises(ValueError, match="weight_dtype='none' is a call without a weight, but weight="):
        pyrms.rms_norm(0x10000, 0x20000, weight, 1e-6, (1, 3), hidden, dtype="bfloat16", weight_dtype="none")
    pyrms.rms_norm(0x10000, 0x20000, 0, 1e-6, 3, hidden, dtype="bfloat16", weight_dtype="none")

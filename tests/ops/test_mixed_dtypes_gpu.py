"""Mixed dtypes on the GPU: an fp32 weight (and LayerNorm's fp32 bias) beside bf16/fp16
rows, and an fp32 output for bf16/fp16 input, for rms_norm (plain and N-D), fused_add_rms_norm (its fp32
out of its own) and layer_norm; bitwise equality with the twin (docs/numerics.md, "Mixed dtypes") on every
misalignment of every pointer (an fp32 output's 32-byte vector: offsets 0..7), hidden sizes, strides and both
launch shapes, through tests.support.testing's guarded, poisoned operands.

Kept cheap: at most 3 rows for the sweeps and a few hundred short rows for the many-row kernels, since the
numpy twin is what costs here.
"""
import functools

import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.tensor import Tensor
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.ops.rms_norm.cases import check_rms_norm, check_rms_norm_nd
from tests.support.testing import bits
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16"]
F32 = "float32"


def _rms(rng, dtype, rows, hidden, *, offsets=None, strides=None, **options):
    """check_rms_norm with offsets and strides by name, as the family's checkers take them."""
    offsets, strides = offsets or {}, strides or {}
    check_rms_norm(rng, dtype, rows, hidden, in_off=offsets.get("input", 0), w_off=offsets.get("weight", 0),
                   out_off=offsets.get("out", 0), in_stride=strides.get("input"), out_stride=strides.get("out"),
                   **options)


# (check, its operand names, weight kinds to run)
CHECKS = {
    "rms_norm": (_rms, ("input", "weight", "out"), ("same", "float32", "none")),
    "fused_add": (check_fused_add_rms_norm, ("input", "residual", "weight", "out"), ("same", "float32")),
    "layer_norm": (check_layer_norm, ("input", "out", "weight", "bias"), ("same", "float32", "none")),
    "layer_norm_no_bias": (functools.partial(check_layer_norm, bias=False), ("input", "out", "weight"),
                           ("float32",)),
}


def _elems(name: str, dtype: str, weight: str) -> int:
    """Element offsets that reach every position of an operand in its vector: the fp32 output's is 32 bytes
    (8 elements), an fp32 weight's or bias's 16 (4), the rows' 16 bytes of their dtype."""
    if name == "out":
        return 8
    if name in ("weight", "bias") and weight == "float32":
        return 4
    return dtypes.get(dtype).vec_elems


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 769, 5125])
def test_each_pointer_misaligned_by_every_element_offset(rng, op, dtype, hidden, variant):
    check, names, weights = CHECKS[op]
    for weight in weights:
        for name in names:
            if name in ("weight", "bias") and weight == "none":
                continue
            for off in range(_elems(name, dtype, weight)):
                check(rng, dtype, 3, hidden, offsets={name: off}, variant=variant, weight=weight, out_dtype=F32)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pointers_misaligned_differently(rng, op, dtype):
    check, names, _ = CHECKS[op]
    for shift in (1, 3, 5, 7):
        offsets = {name: (shift * (k + 1)) % _elems(name, dtype, "float32") for k, name in enumerate(names)}
        for hidden in (8, 9, 4096, 5120):
            check(rng, dtype, 2, hidden, offsets=offsets, weight="float32", out_dtype=F32)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 5, 8, 9, 31, 4096, 8192, 16384, 65536, 65537])
def test_hidden_sizes(rng, op, dtype, hidden):
    check, names, _ = CHECKS[op]
    for variant in ("few", "many"):
        check(rng, dtype, 2, hidden, variant=variant, weight="float32", out_dtype=F32)
        check(rng, dtype, 1, hidden, offsets={name: 1 for name in names}, variant=variant, out_dtype=F32)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, stride_a, stride_b", [(5120, 5123, 5131), (769, 1001, 771), (16, 17, 19)])
def test_row_strides(rng, op, dtype, hidden, stride_a, stride_b):
    """Row strides larger than hidden and not multiples of the vector, for the rows read and the fp32 out."""
    check, names, _ = CHECKS[op]
    rows = [n for n in names if n not in ("weight", "bias")]
    strides = {name: (stride_a, stride_b)[k % 2] for k, name in enumerate(rows)}
    for variant in ("few", "many"):
        check(rng, dtype, 3, hidden, strides=strides, variant=variant, weight="float32", out_dtype=F32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 128, 769])
def test_many_rows(rng, dtype, hidden):
    """Many rows as planned (the packed kernel of short rows for rms_norm, the many-row kernels), strided."""
    rows = 300
    _rms(rng, dtype, rows, hidden, weight="float32", out_dtype=F32)
    _rms(rng, dtype, rows, hidden, offsets={"out": 3, "input": 1}, strides={"out": hidden + 5}, weight="none",
         out_dtype=F32)
    check_fused_add_rms_norm(rng, dtype, rows, hidden, offsets={"out": 5}, weight="float32", out_dtype=F32)
    check_layer_norm(rng, dtype, rows, hidden, offsets={"out": 2}, weight="float32", out_dtype=F32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("round_once", [False, True])
@pytest.mark.parametrize("gemma", [False, True])
def test_rounding_options(rng, dtype, round_once, gemma):
    for hidden in (9, 5120):
        for variant in ("few", "many"):
            _rms(rng, dtype, 2, hidden, offsets={"out": 3}, gemma=gemma, round_once=round_once, weight="float32",
                 variant=variant, out_dtype=F32)
            check_fused_add_rms_norm(rng, dtype, 2, hidden, gemma=gemma, round_once=round_once, weight="same",
                                     variant=variant, out_dtype=F32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_aligned_kernel_needs_a_32_byte_aligned_fp32_out(rng, dtype):
    """Few rows, every pointer 16-byte aligned and hidden a multiple of the vector: the ALIGNED kernel takes
    an fp32 out at a 32-byte boundary only; 16 bytes past one (offset 4) takes the general one. Same bits."""
    for out_off in (0, 4):
        for op in ("rms_norm", "fused_add", "layer_norm"):
            check, _, _ = CHECKS[op]
            check(rng, dtype, 2, 4096, offsets={"out": out_off}, weight="float32", out_dtype=F32, variant="few")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("round_once", [False, True])
def test_fp32_out_rounds_to_the_dtype_out(rng, dtype, round_once):
    """round_T(fp32 out) is the T output, bit for bit, for rms_norm and layer_norm (docs/numerics.md)."""
    dt = dtypes.get(dtype)
    x = rng.uniform(-3, 3, (5, 5125)).astype(dt.numpy)
    w = rng.uniform(-1, 1, 5125).astype(np.float32)
    b = rng.uniform(-1, 1, 5125).astype(np.float32)
    with Tensor.from_numpy(x) as xt, Tensor.from_numpy(w) as wt, Tensor.from_numpy(b) as bt:
        for call in (lambda **o: pyrms.rms_norm(None, xt, wt, 1e-6, round_once=round_once, **o),
                     lambda **o: pyrms.layer_norm(None, xt, wt, bt, 1e-5, **o)):
            with call() as low, call(out_dtype=F32) as high:
                driver.synchronize()
                assert high.dtype is dtypes.FLOAT32 and low.dtype is dt
                assert np.array_equal(bits(high.to_numpy().astype(dt.numpy)), bits(low.to_numpy()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nd_views_with_an_fp32_out(rng, dtype):
    """N-D views (a QK-norm slice, transposed heads) and a weight per outer row, into an fp32 out."""
    check_rms_norm_nd(rng, dtype, (4, 8), 128, in_strides=(8 * 384, 384), out_off=3, weight="float32",
                      out_dtype=F32)
    check_rms_norm_nd(rng, dtype, (2, 3, 5), 64, in_strides=(3 * 5 * 64, 64, 3 * 64), per_row=True, out_dtype=F32)
    check_rms_norm_nd(rng, dtype, (2, 6), 128, as_arrays=True, weight="float32", out_dtype=F32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_arrays_take_an_fp32_out_and_refuse_in_place(rng, dtype):
    dt = dtypes.get(dtype)
    x = rng.uniform(-2, 2, (3, 769)).astype(dt.numpy)
    w = rng.uniform(-1, 1, 769).astype(np.float32)
    p = rms_plan.plan_rms_norm(dt, 769)
    with Tensor.from_numpy(x) as xt, Tensor.from_numpy(w) as wt, Tensor.empty((3, 769), F32) as out:
        assert pyrms.rms_norm(out, xt, wt, 1e-6) is out  # the out array's dtype is the output's
        driver.synchronize()
        want = rms_twin.rms_norm_twin(x, w, 1e-6, block=p.block, out_dtype=F32)
        assert np.array_equal(bits(out.to_numpy()), bits(want))
        with pytest.raises(ValueError, match="in place needs one dtype"):
            pyrms.rms_norm(xt.ptr, xt.ptr, wt.ptr, 1e-6, 3, 769, dtype=dt, weight_dtype=F32, out_dtype=F32)
        with pytest.raises(ValueError, match="in place needs one dtype"):
            pyrms.layer_norm(xt.ptr, xt.ptr, None, None, 1e-6, 3, 769, dtype=dt, out_dtype=F32)

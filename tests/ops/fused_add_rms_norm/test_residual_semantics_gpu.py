"""fused_add_rms_norm's second semantics on the GPU (docs/numerics.md, "Fused residual add"): the fp32
sum (sum_precision="fp32": FlashInfer's, SGLang's) and the fp32 residual stream beside bf16 or fp16
rows (residual_dtype=float32: QuACK's, Transformer Engine's), bit for bit against the twin on every
misalignment of every pointer (an fp32 residual's in its own 4-element vectors), strides, both launch
shapes, and the options; plus proof that the fp32 sum is not the rounded one under another name.

Kept cheap (the numpy twin is the cost): rows x hidden stays small except in a few cases.
"""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops import _row_plan as plan
from pyrms.tensor import Tensor
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.support.testing import allocate, bits, phases
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16"]  # float32 rows have one semantics (plan_fused_add_rms_norm)
# (sum_precision, residual_dtype): the fp32 sum stored rounded, and an fp32 residual
SEMANTICS = {"fp32_sum": dict(sum_precision="fp32"), "fp32_residual": dict(residual_dtype="float32")}
NAMES = ("input", "residual", "weight")


def _vec(dtype, name, semantics):
    """Elements per 16-byte vector of the operand `name` (the residual's own dtype)."""
    return 4 if name == "residual" and semantics == "fp32_residual" else dtypes.get(dtype).vec_elems


@pytest.mark.parametrize("variant", ["few", "many"])  # the kernels for few and for many rows
@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 769, 5125])
def test_each_pointer_misaligned_by_every_element_offset(rng, dtype, semantics, hidden, variant):
    for name in NAMES:
        for off in range(_vec(dtype, name, semantics)):
            check_fused_add_rms_norm(rng, dtype, 3, hidden, offsets={name: off}, variant=variant, **SEMANTICS[semantics])


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pointers_misaligned_differently(rng, dtype, semantics):
    n = dtypes.get(dtype).vec_elems
    for shift in (1, 2, 3, n - 1):
        offsets = {name: (shift * (k + 1)) % _vec(dtype, name, semantics) for k, name in enumerate(NAMES)}
        for hidden in (8, 9, 4096, 5120):
            for variant in ("few", "many"):
                check_fused_add_rms_norm(rng, dtype, 2, hidden, offsets=offsets, variant=variant, **SEMANTICS[semantics])


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 5, 8, 9, 31, 4096, 8192, 16384, 65536, 65537])
def test_hidden_sizes(rng, dtype, semantics, hidden):
    for variant in ("few", "many"):
        check_fused_add_rms_norm(rng, dtype, 2, hidden, variant=variant, **SEMANTICS[semantics])
        check_fused_add_rms_norm(rng, dtype, 2, hidden, offsets={name: 1 for name in NAMES}, variant=variant,
                                 **SEMANTICS[semantics])


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, stride_a, stride_b", [(5120, 5123, 5131), (769, 1001, 771), (16, 17, 19),
                                                        (4096, 4104, 4100)])
def test_row_strides(rng, dtype, semantics, hidden, stride_a, stride_b):
    for variant in ("few", "many"):
        check_fused_add_rms_norm(rng, dtype, 5, hidden, strides={"input": stride_a, "residual": stride_b},
                                 offsets={"input": 1, "residual": 3}, variant=variant, **SEMANTICS[semantics])
        check_fused_add_rms_norm(rng, dtype, 4, hidden, strides={"input": stride_b, "residual": stride_a},
                                 variant=variant, **SEMANTICS[semantics])


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_options_and_row_counts(rng, dtype, semantics):
    options = SEMANTICS[semantics]
    for extra in (dict(gemma=True), dict(round_once=True), dict(gemma=True, round_once=True), dict(weight="float32"),
                  dict(weight="none"), dict(weight="float32", round_once=True, offsets={"weight": 1}), dict(pdl=False)):
        check_fused_add_rms_norm(rng, dtype, 3, 5125, **options, **extra)
    check_fused_add_rms_norm(rng, dtype, 1, 5120, **options)
    check_fused_add_rms_norm(rng, dtype, plan.FEW_ROWS + 1, 1024, **options)  # as planned: the many-row kernel
    check_fused_add_rms_norm(rng, dtype, 64, 16384, offsets={"residual": 1}, **options)


def test_fp32_float_rows_are_the_rounded_sum(rng):
    """float32 rows: sum_precision="fp32" plans the same kernel and gives the same bits."""
    check_fused_add_rms_norm(rng, "float32", 3, 769, sum_precision="fp32", offsets={"residual": 1})
    check_fused_add_rms_norm(rng, "float32", 3, 769, residual_dtype="float32", sum_precision="fp32")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp32_sum_differs_from_the_rounded_sum(rng, dtype):
    """The same inputs through both semantics: the residuals agree (both store the sum rounded), the
    outputs do not everywhere (the fp32 sum keeps the bits rounding drops), and each matches its twin."""
    rows, hidden = 8, 4096
    dt = dtypes.get(dtype)
    x0, r0 = allocate(rng, dt, rows, hidden), allocate(rng, dt, rows, hidden)
    w = allocate(rng, dt, 1, hidden, low=-1.0, high=1.0)
    got = {}
    try:
        for precision in fused_plan.SUM_PRECISIONS:
            x, r = allocate(rng, dt, rows, hidden), allocate(rng, dt, rows, hidden)
            x.set_values(x0.values())
            r.set_values(r0.values())
            x.upload()
            r.upload()
            pyrms.fused_add_rms_norm(x.ptr, r.ptr, w.ptr, 1e-6, rows, hidden, dtype=dt, sum_precision=precision)
            driver.synchronize()
            got[precision] = x.device_values(), r.device_values()
            p = fused_plan.plan_fused_add_rms_norm(dt, hidden, sum_precision=precision)
            want = fused_twin.fused_add_rms_norm_twin(x0.values(), r0.values(), w.values()[0], 1e-6, block=p.block,
                                                     residual_phases=phases(r0), input_phases=phases(x0),
                                                     sum_precision=precision)
            for g, e in zip(got[precision], want):
                np.testing.assert_array_equal(bits(g), bits(e))
            x.close()
            r.close()
    finally:
        for op in (x0, r0, w):
            op.close()
    np.testing.assert_array_equal(bits(got["rounded"][1]), bits(got["fp32"][1]))
    differ = np.count_nonzero(bits(got["rounded"][0]) != bits(got["fp32"][0]))
    assert 0 < differ < rows * hidden, differ


def test_arrays_give_the_residual_dtype(rng):
    """pyrms Tensors: an fp32 residual array beside bf16 rows selects the fp32 residual stream, with no
    residual_dtype; one that disagrees with it is an error."""
    rows, hidden = 4, 777
    dev = driver.selected_device().ordinal
    x = allocate(rng, dtypes.BFLOAT16, rows, hidden, misalign=3)
    r = allocate(rng, dtypes.FLOAT32, rows, hidden, misalign=1)
    w = allocate(rng, dtypes.BFLOAT16, 1, hidden, low=-1.0, high=1.0)
    try:
        def view(op, dt):
            return Tensor(op.ptr, (rows, hidden), dt, (op.stride, 1), dev, owner=op)

        p = fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, hidden, residual_dtype="float32")
        out, total = fused_twin.fused_add_rms_norm_twin(x.values(), r.values(), w.values()[0], 1e-6, block=p.block,
                                                       input_phases=phases(x), sum_precision="fp32")
        wt = Tensor(w.ptr, (hidden,), dtypes.BFLOAT16, (1,), dev, owner=w)
        with pytest.raises(ValueError, match="residual has dtype float32, but residual_dtype is bfloat16"):
            pyrms.fused_add_rms_norm(view(x, dtypes.BFLOAT16), view(r, dtypes.FLOAT32), wt, 1e-6,
                                     residual_dtype="bfloat16")
        with pytest.raises(ValueError, match="sum_precision must be 'fp32'"):
            pyrms.fused_add_rms_norm(view(x, dtypes.BFLOAT16), view(r, dtypes.FLOAT32), wt, 1e-6,
                                     sum_precision="rounded")
        pyrms.fused_add_rms_norm(view(x, dtypes.BFLOAT16), view(r, dtypes.FLOAT32), wt, 1e-6)
        driver.synchronize()
        np.testing.assert_array_equal(bits(x.device_values()), bits(out))
        np.testing.assert_array_equal(bits(r.device_values()), bits(total))
    finally:
        for op in (x, r, w):
            op.close()

"""pyrms.rms_norm(rstd=) on the GPU: each row's inv_rms stored bitwise as the row core twin computes it (guarded,
misaligned, both kernels for few and many rows, short rows that would be packed, the options), the output
unchanged; and that rstd handed to rms_norm_backward gives the bits of the backward that recomputes it."""
import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms.ops import _row_plan as planner
from tests.ops.rms_norm.cases import check_rms_norm
from tests.support.testing import bits

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 64, 128, 769, 4096, 5120, 8192, 65537])
@pytest.mark.parametrize("variant", ["few", "many"])
def test_rstd_is_the_twins_statistics(rng, dtype, hidden, variant):
    rows = 3 if variant == "few" else planner.FEW_ROWS + 21
    check_rms_norm(rng, dtype, rows, hidden, variant=variant, rstd_off=0)
    check_rms_norm(rng, dtype, rows, hidden, variant=variant, rstd_off=3, in_off=1, out_off=2, w_off=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_rows_that_would_be_packed(rng, dtype):
    for hidden in (64, 128, 256):
        check_rms_norm(rng, dtype, 3000, hidden, rstd_off=1)


@pytest.mark.parametrize("options", [dict(gemma=True, round_once=True), dict(weight="none"), dict(weight="float32"),
                                     dict(out_dtype="float32"), dict(in_place=True), dict(in_stride=5200, out_stride=5300)],
                         ids=lambda o: " ".join(f"{k}={v}" for k, v in o.items()))
def test_options(rng, options):
    dtype = "float32" if options.get("in_place") else "bfloat16"
    for rows in (5, 700):
        check_rms_norm(rng, dtype, rows, 5120, rstd_off=2, **options)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, hidden", [(1, 4096), (300, 769), (3000, 5120), (5000, 128)])
def test_the_forwards_rstd_gives_the_backward_its_recomputed_bits(rng, dtype, rows, hidden):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.standard_normal((rows, hidden)).astype(np_dtype)
    dy = rng.standard_normal((rows, hidden)).astype(np_dtype)
    w = rng.standard_normal(hidden).astype(np_dtype)
    with pyrms.Tensor.from_numpy(x) as tx, pyrms.Tensor.from_numpy(dy) as tdy, pyrms.Tensor.from_numpy(w) as tw, \
            pyrms.Tensor.empty((rows, hidden), dtype) as y, pyrms.Tensor.empty((rows,), "float32") as rstd:
        pyrms.rms_norm(y, tx, tw, 1e-6, rstd=rstd)
        grads = []
        for saved in (None, rstd):
            with pyrms.Tensor.empty((rows, hidden), dtype) as dx, pyrms.Tensor.empty((hidden,), dtype) as dw:
                pyrms.rms_norm_backward(dx, dw, tdy, tx, tw, 1e-6, rstd=saved)
                grads.append((dx.to_numpy(), dw.to_numpy()))
        with pyrms.rms_norm(None, tx, tw, 1e-6) as plain:  # the output does not change with rstd
            assert np.array_equal(bits(plain.to_numpy()), bits(y.to_numpy()))
    for a, b in zip(*grads):
        assert np.array_equal(bits(a), bits(b))

"""LayerNorm's saved statistics on the GPU: pyrms.layer_norm(mean=, rstd=) stores each row's mean and inv bitwise
as the row core twin computes them (guarded, misaligned, few and many rows, the options; rstd alone with rms=True),
the output unchanged; layer_norm_backward given them is bitwise the twin (the rows kernel and the staged one, one
row per block and chunks), and given the forward's, bitwise the backward that recomputes them."""
import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms.ops import _row_plan as planner
from pyrms.ops._norm_backward import plan as bwd_plan
from tests.ops.layer_norm.cases import check_layer_norm
from tests.support.testing import bits, check_norm_backward

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
# the backward: one row per block (few), chunks of rows per block (many; past the staged kernel's threshold too)
ROWS = [1, 37, bwd_plan.BACKWARD_STAGED_FEW_ROWS + 333, bwd_plan.BACKWARD_FEW_ROWS + 77]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 64, 769, 4096, 5120, 8192, 65537])
@pytest.mark.parametrize("variant", ["few", "many"])
def test_the_statistics_are_the_twins(rng, dtype, hidden, variant):
    rows = 3 if variant == "few" else planner.FEW_ROWS + 21
    check_layer_norm(rng, dtype, rows, hidden, variant=variant, stats_off=0)
    check_layer_norm(rng, dtype, rows, hidden, variant=variant, stats_off=3,
                     offsets={"input": 1, "out": 2, "weight": 1, "bias": 3})


@pytest.mark.parametrize("options", [dict(bias=False), dict(weight="none"), dict(weight="float32"),
                                     dict(out_dtype="float32"), dict(in_place=True), dict(rms=True),
                                     dict(strides={"input": 5200, "out": 5300})],
                         ids=lambda o: " ".join(f"{k}={v}" for k, v in o.items()))
def test_options(rng, options):
    dtype = "float32" if options.get("in_place") else "bfloat16"
    for rows in (5, 700):
        check_layer_norm(rng, dtype, rows, 5120, stats_off=2, **options)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 769, 4096, 5120])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("offsets", [None, {"input": 1, "mean": 1, "rstd": 3}], ids=["aligned", "misaligned"])
def test_the_forwards_statistics_give_the_recomputed_bits(dtype, hidden, rows, offsets):
    recomputed = check_norm_backward(np.random.default_rng(7), dtype, rows, hidden, layer_norm=True, offsets=offsets)
    given = check_norm_backward(np.random.default_rng(7), dtype, rows, hidden, layer_norm=True, offsets=offsets,
                                rstd="forward")
    for name, got in given.items():
        assert np.array_equal(bits(got), bits(recomputed[name])), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 5120])
@pytest.mark.parametrize("options", [dict(weight="none"), dict(weight="none", grad_bias=False), dict(grad_bias=False),
                                     dict(grad_dtype="float32"), dict(in_place="input"), dict(rows_per_block=16),
                                     dict(rows_per_block=1), dict(strides={"input": 5200, "grad_output": 5300})],
                         ids=lambda o: " ".join(f"{k}={v}" for k, v in o.items()))
def test_other_values_are_used_as_given(rng, dtype, hidden, options):
    strides = options.get("strides")
    if strides and hidden > min(strides.values()):
        strides = {k: v - 5120 + hidden for k, v in strides.items()}
    check_norm_backward(rng, dtype, 150, hidden, layer_norm=True, rstd="random",
                        **{**options, **({"strides": strides} if strides else {})})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_with_an_fp32_weight_and_grad_output(rng, dtype):
    for rows in (1, 150, 3000):
        check_norm_backward(rng, dtype, rows, 4096, layer_norm=True, weight="float32", grad_output_kind="float32",
                            rstd="forward")
        check_norm_backward(rng, dtype, rows, 4096, layer_norm=True, weight="float32", rstd="random")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, hidden", [(1, 4096), (300, 769), (3000, 5120), (5000, 128)])
@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms with a bias"])
def test_forward_then_backward_end_to_end(rng, dtype, rows, hidden, rms):
    """The forward's own statistics handed to the backward (LayerNorm's, or RMSNorm-with-a-bias's rstd to
    rms_norm_backward) give the bits of the backward that recomputes them."""
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    host = [rng.standard_normal(shape).astype(np_dtype) for shape in ((rows, hidden), (rows, hidden), (hidden,),
                                                                       (hidden,))]
    with pyrms.Tensor.from_numpy(host[0]) as x, pyrms.Tensor.from_numpy(host[1]) as dy, \
            pyrms.Tensor.from_numpy(host[2]) as w, pyrms.Tensor.from_numpy(host[3]) as b, \
            pyrms.Tensor.empty((rows, hidden), dtype) as y, pyrms.Tensor.empty((rows,), "float32") as mean, \
            pyrms.Tensor.empty((rows,), "float32") as rstd:
        stats = dict(rstd=rstd) if rms else dict(mean=mean, rstd=rstd)
        pyrms.layer_norm(y, x, w, b, 1e-5, rms=rms, **stats)
        grads = []
        for saved in ({}, stats):
            with pyrms.Tensor.empty((rows, hidden), dtype) as dx, pyrms.Tensor.empty((hidden,), dtype) as dw, \
                    pyrms.Tensor.empty((hidden,), dtype) as db:
                if rms:
                    pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-5, grad_bias=db, **saved)
                else:
                    pyrms.layer_norm_backward(dx, dw, db, dy, x, w, 1e-5, **saved)
                grads.append((dx.to_numpy(), dw.to_numpy(), db.to_numpy()))
        with pyrms.layer_norm(None, x, w, b, 1e-5, rms=rms) as plain:  # the output does not change with the stats
            assert np.array_equal(bits(plain.to_numpy()), bits(y.to_numpy()))
    for a, b_ in zip(*grads):
        assert np.array_equal(bits(a), bits(b_))

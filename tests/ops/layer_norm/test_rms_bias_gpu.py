"""RMSNorm with a bias on the GPU: layer_norm(rms=True) and rms_norm_backward(grad_bias=) bitwise against their
twins on guarded operands (aligned and misaligned, every weight kind, few and many rows, both backward kernels),
the forward equal to rms_norm's round_once plus the bias, the backward's dx and dweight those without a bias, and
the errors that name a missing bias or gemma."""
import numpy as np
import pytest

import pyrms
from pyrms.ops._norm_backward import plan as bwd_plan
from tests.ops.layer_norm.cases import check_layer_norm
from tests.support.testing import bits, check_norm_backward

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 769, 4096, 5120])
@pytest.mark.parametrize("rows", [1, 37, 300])
@pytest.mark.parametrize("offsets", [None, {"input": 1, "out": 3, "weight": 2, "bias": 5}],
                         ids=["aligned", "misaligned"])
def test_forward_is_bitwise_the_twin(rng, dtype, hidden, rows, offsets):
    check_layer_norm(rng, dtype, rows, hidden, offsets=offsets, rms=True)


def _with_options(options: list[dict]) -> list:
    """(dtype, options) pairs: an fp32 weight beside 2-byte rows only (fp32 rows have one dtype throughout)."""
    return [pytest.param(dtype, o, id=f"{dtype} " + " ".join(f"{k}={v}" for k, v in o.items())) for dtype in DTYPES
            for o in options if dtype != "float32" or o.get("weight") != "float32"]


@pytest.mark.parametrize("dtype, options", _with_options([
    dict(weight="none"), dict(in_place=True), dict(strides={"input": 5200}), dict(weight="float32"),
    dict(weight="float32", out_dtype="float32")]))
def test_forward_options(rng, dtype, options):
    for rows in (3, 300):
        check_layer_norm(rng, dtype, rows, 5120, rms=True, **options)


# (hidden, rows): the rows kernel (misaligned, or hidden 769) and the staged one (aligned, hidden a multiple of the
# vector), one row per block and chunks of rows per block (past each kernel's few-row threshold)
SHAPES = [(8, 1), (8, 37), (769, 37), (769, bwd_plan.BACKWARD_FEW_ROWS + 77), (4096, 1), (4096, 150),
          (4096, bwd_plan.BACKWARD_STAGED_FEW_ROWS + 333)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, rows", SHAPES)
@pytest.mark.parametrize("offsets", [None, {"input": 1, "grad_bias": 3}], ids=["aligned", "misaligned"])
def test_backward_is_bitwise_the_twin_and_the_plain_backward(dtype, hidden, rows, offsets):
    plain = check_norm_backward(np.random.default_rng(5), dtype, rows, hidden,
                                offsets=offsets and {k: v for k, v in offsets.items() if k != "grad_bias"})
    biased = check_norm_backward(np.random.default_rng(5), dtype, rows, hidden, offsets=offsets, bias=True)
    assert set(biased) == {*plain, "grad_bias"}
    for name, got in plain.items():
        assert np.array_equal(bits(biased[name]), bits(got)), name


@pytest.mark.parametrize("dtype, options", _with_options([
    dict(weight="none"), dict(grad_dtype="float32"), dict(rows_per_block=16), dict(rows_per_block=1),
    dict(rstd="forward"), dict(own_workspace=True), dict(in_place="grad_output"), dict(weight="float32"),
    dict(weight="float32", grad_output_kind="float32")]))
def test_backward_options(rng, dtype, options):
    for rows in (1, 150):
        check_norm_backward(rng, dtype, rows, 4096, bias=True, **options)


def test_the_forward_is_round_once_plus_the_bias(rng):
    import ml_dtypes
    x = pyrms.Tensor.from_numpy((rng.standard_normal((300, 4096)) * 3).astype(ml_dtypes.bfloat16))
    w = pyrms.Tensor.from_numpy(rng.standard_normal(4096).astype(ml_dtypes.bfloat16))
    zero = pyrms.Tensor.from_numpy(np.zeros(4096, dtype=ml_dtypes.bfloat16))
    with x, w, zero:
        biased = pyrms.layer_norm(x, w, zero, eps=1e-5, rms=True).to_numpy().astype(np.float32)
        plain = pyrms.rms_norm(x, w, eps=1e-5, round_once=True).to_numpy().astype(np.float32)
    assert np.array_equal(biased, plain)  # equal as numbers: + 0 turns a -0 into +0


def test_errors_name_the_missing_bias_and_gemma(rng):
    import ml_dtypes
    x = pyrms.Tensor.from_numpy(rng.standard_normal((4, 64)).astype(ml_dtypes.bfloat16))
    w = pyrms.Tensor.from_numpy(rng.standard_normal(64).astype(ml_dtypes.bfloat16))
    with x, w, pyrms.Tensor.empty((4, 64), "bfloat16") as dx, pyrms.Tensor.empty((64,), "bfloat16") as dw, \
            pyrms.Tensor.empty((64,), "bfloat16") as db:
        with pytest.raises(ValueError, match="rms=True is RMSNorm with a bias"):
            pyrms.layer_norm(x, w, None, rms=True)
        with pytest.raises(ValueError, match="gemma with a bias"):
            pyrms.rms_norm_backward(dx, dw, x, x, w, 1e-6, gemma=True, grad_bias=db)
        pyrms.rms_norm_backward(dx, dw, x, x, w, 1e-6, grad_bias=db)  # the same call without gemma launches

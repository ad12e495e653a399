"""rms_norm_backward given the forward's rstd, on the GPU: bitwise the twin on guarded operands (the rows
kernel and the staged one, one row per block and chunks, misaligned pointers and rstd, the options), and
with the forward's values bitwise what recomputing gives; other values are used as given (the twin's)."""
import numpy as np
import pytest

from pyrms.ops._norm_backward import plan as bwd_plan
from tests.support.testing import bits, check_norm_backward as run_case

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
# rows: one row per block (few), chunks of rows per block (many; past the staged kernel's threshold too)
ROWS = [1, 37, bwd_plan.BACKWARD_STAGED_FEW_ROWS + 333, bwd_plan.BACKWARD_FEW_ROWS + 77]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 769, 4096, 5120])
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("offsets", [None, {"input": 1, "rstd": 1}], ids=["aligned", "misaligned"])
def test_the_forwards_rstd_gives_the_recomputed_bits(dtype, hidden, rows, offsets):
    recomputed = run_case(np.random.default_rng(7), dtype, rows, hidden, offsets=offsets)
    given = run_case(np.random.default_rng(7), dtype, rows, hidden, offsets=offsets, rstd="forward")
    for name, got in given.items():
        assert np.array_equal(bits(got), bits(recomputed[name])), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 5120])
@pytest.mark.parametrize("options", [dict(gemma=True), dict(weight="none"), dict(grad_dtype="float32"),
                                     dict(in_place="input"), dict(rows_per_block=16), dict(rows_per_block=1),
                                     dict(strides={"input": 5200, "grad_output": 5300})],
                         ids=lambda o: " ".join(f"{k}={v}" for k, v in o.items()))
def test_other_values_are_used_as_given(rng, dtype, hidden, options):
    strides = options.get("strides")
    if strides and hidden > min(strides.values()):
        strides = {k: v - 5120 + hidden for k, v in strides.items()}
    run_case(rng, dtype, 150, hidden, rstd="random", **{**options, **({"strides": strides} if strides else {})})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_with_an_fp32_weight_and_grad_output(rng, dtype):
    for rows in (1, 150, 3000):
        run_case(rng, dtype, rows, 4096, weight="float32", grad_output_kind="float32", rstd="forward")
        run_case(rng, dtype, rows, 4096, weight="float32", rstd="random")

"""The backward of few rows given the forward's saved statistics, in one launch (norm_backward.cuh's
norm_backward_few), on the GPU: bitwise the twin on guarded, misaligned and strided operands with every option
(RMSNorm and LayerNorm, Gemma, no weight, a bias, fp32 weights and gradients, in place), and bitwise the two
kernels' result that a forced rows_per_block takes, at every row count up to the planned limit and just past it."""
import numpy as np
import pytest

from pyrms.ops._norm_backward import plan as bwd_plan
from tests.support.testing import bits, check_norm_backward as run_case

pytestmark = pytest.mark.gpu

OPS = {"rms_norm": False, "layer_norm": True}
LIMIT = bwd_plan.ONE_LAUNCH_ROWS


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("hidden", [1, 31, 769, 4096, 5120, 8192])
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 32, 37, LIMIT - 1, LIMIT, LIMIT + 1])
def test_the_one_launch_gives_the_two_kernels_bits(op, dtype, hidden, rows):
    """rows_per_block=1 forces kernel 1 and the sums over rows: the same inputs give the same bits."""
    layout = dict(layer_norm=OPS[op], rstd="forward", offsets={"input": 1, "grad_weight": 2},
                  strides={"grad_output": hidden + 3})
    one = run_case(np.random.default_rng(7), dtype, rows, hidden, **layout)
    two = run_case(np.random.default_rng(7), dtype, rows, hidden, rows_per_block=1, **layout)
    for name, got in one.items():
        assert np.array_equal(bits(got), bits(two[name])), name


OPTIONS = [dict(), dict(gemma=True), dict(weight="none"), dict(grad_dtype="float32"), dict(in_place="input"),
           dict(in_place="grad_output"), dict(weight="float32"), dict(weight="float32", grad_output_kind="float32"),
           dict(bias=True), dict(grad_bias=False), dict(weight="none", grad_bias=False),
           dict(offsets={"grad_output": 1, "weight": 3, "grad_input": 2, "rstd": 1, "mean": 3})]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: " ".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_every_option_against_the_twin(rng, op, dtype, options):
    """Random statistics used as given, checked bit for bit against the twin (each run_case is)."""
    centered = OPS[op]
    if (options.get("gemma") or options.get("bias")) and centered:
        pytest.skip("gemma and bias= are RMSNorm's options")
    if "grad_bias" in options and not centered:
        pytest.skip("grad_bias= is LayerNorm's")
    if options.get("weight") == "float32" and dtype == "float32":
        pytest.skip("a float32 weight goes beside 2-byte rows")
    for rows in (1, 7, 64, LIMIT):
        for hidden in (37, 4096):
            run_case(rng, dtype, rows, hidden, layer_norm=centered, rstd="random", **options)

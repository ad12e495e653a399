"""The references and twins of the rest of the family (CPU only): the float64 backward references
against central finite differences of the float64 forward references, and every twin against
float64 within tolerances keyed by dtype."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import reference
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import twin as rms_twin

BF16 = ml_dtypes.bfloat16
DTYPES = [BF16, np.float16, np.float32]
# Relative (norm-wise) error against float64 of a result rounded once or twice to the dtype (half an
# ulp each: 2^-8 bf16, 2^-11 fp16) plus fp32 arithmetic noise; fp32 storage: fp32 noise only.
TOLERANCE = {np.dtype(BF16): 1.6e-2, np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6}


def rel_err(got, want):
    return np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want)


def finite_difference(loss, array, h=1e-6):
    """Central differences of loss() with respect to every element of `array` (changed in place, restored)."""
    grad = np.zeros_like(array)
    for i in np.ndindex(array.shape):
        keep = array[i]
        array[i] = keep + h
        up = loss()
        array[i] = keep - h
        down = loss()
        array[i] = keep
        grad[i] = (up - down) / (2 * h)
    return grad


@pytest.mark.parametrize("hidden", [1, 5, 7])
@pytest.mark.parametrize("gemma", [False, True])
def test_rms_norm_backward_ref_matches_finite_differences(hidden, gemma):
    rng = np.random.default_rng(hidden)
    x, dy = rng.uniform(-2, 2, (3, hidden)), rng.uniform(-1, 1, (3, hidden))
    w = rng.uniform(-1, 1, hidden)
    loss = lambda: np.sum(rms_twin.rms_norm_ref(x, w, 1e-3, gemma=gemma) * dy)  # noqa: E731
    dx, dw = reference.rms_norm_backward_ref(dy, x, w, 1e-3, gemma=gemma)
    np.testing.assert_allclose(dx, finite_difference(loss, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, finite_difference(loss, w), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("hidden", [1, 5, 7])
def test_layer_norm_backward_ref_matches_finite_differences(hidden):
    rng = np.random.default_rng(10 + hidden)
    x, dy = rng.uniform(-2, 2, (3, hidden)) + 3.0, rng.uniform(-1, 1, (3, hidden))
    w, b = rng.uniform(-1, 1, hidden), rng.uniform(-1, 1, hidden)
    loss = lambda: np.sum(ln_twin.layer_norm_ref(x, w, b, 1e-3) * dy)  # noqa: E731
    dx, dw, db = reference.layer_norm_backward_ref(dy, x, w, 1e-3)
    np.testing.assert_allclose(dx, finite_difference(loss, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, finite_difference(loss, w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, finite_difference(loss, b), rtol=1e-6, atol=1e-8)


def test_seed_backward_formula_is_wrong():
    # The seed's dx = (dy - y * sum(dy * y) / D) / rms * w differs from the gradient once w is not
    # all ones; the contract's formula (rms_norm_backward_ref) is the one finite differences confirm.
    rng = np.random.default_rng(3)
    x, dy, w = rng.uniform(-2, 2, (2, 6)), rng.uniform(-1, 1, (2, 6)), rng.uniform(-1, 1, 6)
    rms = np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-5)
    y = x / rms * w
    seed_dx = (dy - y * np.sum(dy * y, axis=1, keepdims=True) / 6) / rms * w
    dx, _ = reference.rms_norm_backward_ref(dy, x, w, 1e-5)
    assert rel_err(seed_dx, dx) > 0.1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 9, 769, 5125])
def test_fused_add_twin_close_to_float64(dtype, hidden):
    rng = np.random.default_rng(hidden)
    x, r = (rng.uniform(-2, 2, (4, hidden)).astype(dtype) for _ in range(2))
    w = rng.uniform(-1, 1, hidden).astype(dtype)
    ref_out, ref_sum = fused_twin.fused_add_rms_norm_ref(x, r, w, 1e-6)
    block = fused_plan.plan_fused_add_rms_norm(dtype, hidden).block
    for phase in range(16 // np.dtype(dtype).itemsize):
        out, total = fused_twin.fused_add_rms_norm_twin(x, r, w, 1e-6, block=block, residual_phases=phase)
        assert total.dtype == np.dtype(dtype) and rel_err(total, ref_sum) < TOLERANCE[np.dtype(dtype)]
        assert rel_err(out, ref_out) < 2 * TOLERANCE[np.dtype(dtype)], phase  # the sum's rounding, then two more
        assert np.array_equal(out, rms_twin.rms_norm_twin(total, w, 1e-6, block=block, row_phases=phase))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 5, 7, 8, 9, 769, 5125])
def test_layer_norm_twin_close_to_float64(dtype, hidden):
    rng = np.random.default_rng(hidden)
    x = rng.uniform(-3, 3, (4, hidden)).astype(dtype)
    w, b = (rng.uniform(-1, 1, hidden).astype(dtype) for _ in range(2))
    ref = ln_twin.layer_norm_ref(x, w, b, 1e-5)
    block = ln_plan.plan_layer_norm(dtype, hidden).block
    for phase in range(16 // np.dtype(dtype).itemsize):
        twin = ln_twin.layer_norm_twin(x, w, b, 1e-5, block=block, row_phases=phase)
        assert rel_err(twin, ref) < TOLERANCE[np.dtype(dtype)], phase


def test_layer_norm_twin_variance_survives_a_large_mean():
    # mean 1000, std 0.6: E[x^2] - mean^2 in fp32 loses the variance to cancellation; two passes do not.
    rng = np.random.default_rng(5)
    x = (1000 + rng.uniform(-1, 1, (8, 4096))).astype(np.float32)
    w, b = np.ones(4096, np.float32), np.zeros(4096, np.float32)
    ref = ln_twin.layer_norm_ref(x, w, b, 1e-6)
    twin_err = rel_err(ln_twin.layer_norm_twin(x, w, b, 1e-6, block=512), ref)
    mean = x.mean(axis=1, keepdims=True, dtype=np.float32)
    naive_var = (x * x).mean(axis=1, keepdims=True, dtype=np.float32) - mean * mean
    naive_err = rel_err((x - mean) / np.sqrt(np.maximum(naive_var, 0) + np.float32(1e-6)), ref)
    assert twin_err < 1e-3 and naive_err > 10 * twin_err, (twin_err, naive_err)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 769, 5125])
@pytest.mark.parametrize("layer_norm, gemma", [(False, False), (False, True), (True, False)])
def test_backward_twin_close_to_float64(dtype, hidden, layer_norm, gemma):
    rng = np.random.default_rng(hidden)
    rows = 37  # three chunks, the last partial
    x = rng.uniform(-2, 2, (rows, hidden)).astype(dtype)
    dy = rng.uniform(-1, 1, (rows, hidden)).astype(dtype)
    w = rng.uniform(-1, 1, hidden).astype(dtype)
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=layer_norm, gemma=gemma, grad_dtype="float32")
    if layer_norm:
        ref = reference.layer_norm_backward_ref(dy, x, w, 1e-5)
    else:
        ref = reference.rms_norm_backward_ref(dy, x, w, 1e-5, gemma=gemma)
    n = 16 // np.dtype(dtype).itemsize
    for x_phase, w_phase in ((0, 0), (1, n - 1), (n - 1, 2 % n)):
        got = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, block=p.block, fold=p.stats_fold, x_phases=x_phase,
                                           weight_phase=w_phase, chunk_rows=p.chunk_rows, centered=layer_norm, gemma=gemma,
                                           grad_dtype="float32")
        assert got[0].dtype == np.dtype(dtype) and all(g.dtype == np.float32 for g in got[1:])
        if hidden > 1:  # one element: dx = r * (g - x_hat^2 * g) cancels (LayerNorm: exactly 0)
            assert rel_err(got[0], ref[0]) < TOLERANCE[np.dtype(dtype)] + 2e-5
        for g, r in zip(got[1:], ref[1:]):  # fp32 sums of exact products
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6 * np.abs(r).max() + 1e-12)


def test_backward_twin_sum_orders_are_not_the_naive_ones():
    # The twin must model the kernels' orders, or bitwise GPU checks would prove little: the chunked,
    # laned sum over rows differs from a sequential one somewhere, and so does the row dot product.
    rng = np.random.default_rng(6)
    terms = rng.uniform(-1, 1, (2000, 64)).astype(np.float32)
    laned = bwd_twin.sum_partials_twin(bwd_twin.chunk_sums_twin(terms, bwd_plan.GRAD_CHUNK_ROWS))
    sequential = np.add.accumulate(terms, axis=0, dtype=np.float32)[-1]
    assert np.any(laned != sequential)
    np.testing.assert_allclose(laned, terms.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-5)
    lanes = np.arange(2000) // bwd_plan.GRAD_CHUNK_ROWS % 32
    np.testing.assert_allclose(laned, sum(terms[lanes == y].astype(np.float64).sum(axis=0) for y in range(32)),
                               rtol=1e-4, atol=1e-5)


def test_backward_twin_does_not_depend_on_the_batch_for_dx():
    rng = np.random.default_rng(7)
    x, dy = (rng.uniform(-2, 2, (40, 300)).astype(np.float16) for _ in range(2))
    w = rng.uniform(-1, 1, 300).astype(np.float16)
    full = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, block=64, fold=64, chunk_rows=16, centered=True)
    for r in (0, 17, 39):
        single = bwd_twin.norm_backward_twin(dy[r:r + 1], x[r:r + 1], w, 1e-5, block=64, fold=64, chunk_rows=16,
                                              centered=True)
        assert np.array_equal(single[0][0], full[0][r])

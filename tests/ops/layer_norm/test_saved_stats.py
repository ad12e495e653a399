"""LayerNorm's saved statistics on the CPU: the backward twin given the twin's own mean and rstd is the twin
that recomputes them (the same bits), and other values are used as given; where the forward's and the backward's
raw calls put the pointers (the fake driver); every refusal names the argument."""
import numpy as np
import pytest

import pyrms
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops._row_twin import row_stats_twin
from tests.ops.test_convention import LAYER_NORM_ARGS, EveryKernel, launched
from tests.ops.test_fake_end_to_end import f32
from tests.support.testing import bits
from tests.support.validation_calls import A, B, C, D, E, F, backward


def twin_case(rng, dtype, rows=37, hidden=769):
    x = (rng.standard_normal((rows, hidden)) + 3.0).astype(dtype)  # a mean far from 0: its subtraction matters
    dy = rng.standard_normal((rows, hidden)).astype(dtype)
    w = rng.standard_normal(hidden).astype(dtype)
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=True)
    kw = dict(block=p.block, fold=p.stats_fold, x_phases=3, weight_phase=1, chunk_rows=p.chunk_rows, centered=True)
    return x, dy, w, p, kw


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_twin_given_its_own_statistics_is_the_twin(rng, dtype):
    x, dy, w, p, kw = twin_case(rng, dtype)
    mean, inv = row_stats_twin(x.astype(np.float32), 1e-5, p.stats_fold, 3, p.dtype.vec_elems, centered=True)
    recomputed = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, **kw)
    given = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, mean=mean, rstd=inv, **kw)
    assert len(given) == 3  # dx, dweight, dbias
    for a, b in zip(recomputed, given):
        assert np.array_equal(bits(a), bits(b))


def test_twin_uses_other_values_as_given(rng):
    """Other statistics are m and r themselves: dx = r (g - mean(g) - x_hat mean(x_hat g)), x_hat = (x - m) r."""
    x, dy, w, p, kw = twin_case(rng, "float32", rows=5, hidden=64)
    m, r = rng.uniform(-1.0, 1.0, 5).astype(np.float32), rng.uniform(0.5, 2.0, 5).astype(np.float32)
    dx, dw, db = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, mean=m, rstd=r, **kw)
    r64, m64, g = r.astype(np.float64)[:, None], m.astype(np.float64)[:, None], w.astype(np.float64) * dy
    x_hat = (x.astype(np.float64) - m64) * r64
    want = r64 * (g - g.mean(axis=1, keepdims=True) - x_hat * np.mean(x_hat * g, axis=1, keepdims=True))
    assert np.allclose(dx, want, rtol=1e-4, atol=1e-5)
    assert np.allclose(dw, (dy * x_hat).sum(axis=0), rtol=1e-4, atol=1e-4)
    assert np.allclose(db, dy.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_backward_validation_names_the_statistic():
    with pytest.raises(ValueError, match="rstd was given without mean: LayerNorm's backward reads"):
        backward(True, rstd=0x70000)
    with pytest.raises(ValueError, match="mean was given without rstd"):
        backward(True, mean=0x70000)
    with pytest.raises(ValueError, match=r"mean must be a non-null, 4-byte aligned device pointer .* got 458754"):
        backward(True, mean=0x70002, rstd=0x70100)
    with pytest.raises(ValueError, match="overlap"):
        backward(True, mean=A + 64, rstd=0x70100)  # inside grad_input's rows, which the backward writes
    with pytest.raises(ValueError, match="overlap"):
        backward(True, mean=0x70000, rstd=F)  # grad_bias
    with pytest.raises(TypeError, match="mean"):
        pyrms.rms_norm_backward(A, B, C, D, E, 1e-5, 4, 64, mean=F)


def test_forward_validation_names_the_statistic():
    with pytest.raises(ValueError, match="mean was given without rstd: LayerNorm's backward reads both"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, mean=0x70000)
    with pytest.raises(ValueError, match="rstd was given without mean"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, rstd=0x70000)
    with pytest.raises(ValueError, match="mean was given with rms=True"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, rms=True, mean=0x70000, rstd=0x70100)
    with pytest.raises(ValueError, match="rstd must be a non-null, 4-byte aligned"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, mean=0x70000, rstd=0x70101)
    with pytest.raises(ValueError, match="overlap"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, mean=A + 8, rstd=0x70100)  # inside out's rows
    with pytest.raises(ValueError, match="overlap"):
        pyrms.layer_norm(A, B, C, D, 1e-5, 4, 64, mean=0x70000, rstd=0x70000 + 8)  # the two overlap


def test_forward_packs_mean_then_rstd_after_the_bias(arrays):
    fake, x, w, b, y = arrays
    fake.kernel_params = EveryKernel(LAYER_NORM_ARGS)
    with pyrms.Tensor.empty((4,), "float32") as mean, pyrms.Tensor.empty((4, 1), "float32") as rstd:
        _, expected = launched(fake, lambda: pyrms.layer_norm(y, x, w, b, 1e-5, mean=mean, rstd=rstd))
        assert expected.args[:7] == (y.ptr, x.ptr, w.ptr, b.ptr, mean.ptr, rstd.ptr, f32(1e-5))
        for call in (lambda: pyrms.layer_norm(x, w, b, 1e-5, out=y, mean=mean, rstd=rstd),
                     lambda: pyrms.layer_norm(y.ptr, x.ptr, w.ptr, b.ptr, 1e-5, 4, 64, mean=mean.ptr, rstd=rstd.ptr)):
            assert launched(fake, call)[1] == expected
        _, launch = launched(fake, lambda: pyrms.layer_norm(y, x, w, b, 1e-5, rms=True, rstd=rstd))
        assert launch.args[4:6] == (0, rstd.ptr)  # RMSNorm with a bias: rstd alone
        with pytest.raises(ValueError, match=r"mean has dtype bfloat16; mean's values are float32"):
            pyrms.layer_norm(y, x, w, b, 1e-5, mean=x, rstd=rstd)

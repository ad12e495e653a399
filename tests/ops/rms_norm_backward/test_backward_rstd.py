"""rms_norm_backward given the forward's rstd, on the CPU: the twin with its own statistics as rstd is the twin
(the same bits), and with other values uses them; argument validation naming the argument; over the fake
driver, where the pointer goes in each kernel's arguments."""
import numpy as np
import pytest

import pyrms
from pyrms.ops._row_twin import row_stats_twin
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.tensor import Tensor
from tests.support.testing import bits
from tests.support.validation_calls import A, B, C, D, E, F, backward


def twin_case(rng, dtype="bfloat16", rows=37, hidden=769):
    x = rng.standard_normal((rows, hidden)).astype(dtype)
    dy = rng.standard_normal((rows, hidden)).astype(dtype)
    w = rng.standard_normal(hidden).astype(dtype)
    p = bwd_plan.plan_norm_backward(dtype, hidden)
    kw = dict(block=p.block, fold=p.stats_fold, x_phases=3, weight_phase=1, chunk_rows=p.chunk_rows)
    return x, dy, w, p, kw


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_twin_given_its_own_statistics_is_the_twin(rng, dtype):
    x, dy, w, p, kw = twin_case(rng, dtype)
    inv = row_stats_twin(x.astype(np.float32), 1e-5, p.stats_fold, 3, p.dtype.vec_elems)[1]
    recomputed = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, **kw)
    given = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, rstd=inv, **kw)
    for a, b in zip(recomputed, given):
        assert np.array_equal(bits(a), bits(b))


def test_twin_uses_other_values_as_given(rng):
    """Another rstd is r itself: the float64 reference of dx at that r (dx = r (g - x r mean(x r g)))."""
    x, dy, w, p, kw = twin_case(rng, "float32", rows=5, hidden=64)
    r = rng.uniform(0.5, 2.0, 5).astype(np.float32)
    dx, dw = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, rstd=r, **kw)
    r64, x64, g = r.astype(np.float64)[:, None], x.astype(np.float64), w.astype(np.float64) * dy
    want = r64 * (g - x64 * r64 * np.mean(x64 * r64 * g, axis=1, keepdims=True))
    assert np.allclose(dx, want, rtol=1e-5, atol=1e-6)
    assert np.allclose(dw, (dy * x * r[:, None]).sum(axis=0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="a saved mean goes with a saved rstd, and LayerNorm's"):
        bwd_twin.norm_backward_twin(dy, x, w, 1e-5, rstd=r, centered=True, **kw)  # LayerNorm's needs its mean too
    with pytest.raises(ValueError, match="a saved mean goes with a saved rstd, and LayerNorm's"):
        bwd_twin.norm_backward_twin(dy, x, w, 1e-5, rstd=r, mean=r, **kw)  # RMSNorm subtracts none


def test_validation_of_rstd():
    with pytest.raises(ValueError, match=r"rstd must be a non-null, 4-byte aligned device pointer to num_tokens "
                                         r"float32 \(or such an array\), got 0"):
        backward(rstd=0)
    with pytest.raises(ValueError, match=f"got {F + 2}"):
        backward(rstd=F + 2)
    with pytest.raises(ValueError, match="overlap"):
        backward(rstd=A + 64)  # inside grad_input's rows, which the backward writes
    with pytest.raises(ValueError, match="overlap"):
        backward(rstd=B)  # grad_weight


def test_array_rstd_is_checked(recorded):
    rows, hidden = 4, 64
    dx, dy, x = (Tensor.empty((rows, hidden), "bfloat16") for _ in range(3))
    w, dw = Tensor.empty((hidden,), "bfloat16"), Tensor.empty((hidden,), "bfloat16")
    with pytest.raises(ValueError, match=r"rstd has dtype bfloat16; a saved rstd's values are float32"):
        pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-5, rstd=Tensor.empty((rows,), "bfloat16"))
    with pytest.raises(ValueError, match=r"rstd has shape \(5,\); a saved rstd's values are \(4,\) or \(4, 1\)"):
        pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-5, rstd=Tensor.empty((rows + 1,), "float32"))
    calls, _ = recorded
    saved = Tensor.empty((rows, 1), "float32")
    pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-5, rstd=saved)
    assert calls[0][4][7] == saved.ptr  # few rows: the one launch's, after the weight


@pytest.mark.parametrize("aligned", [True, False])
def test_the_pointer_follows_the_weight_in_every_kernel(recorded, aligned):
    """Raw pointers: rstd is the sixth argument of the staged kernel (every pointer 16-byte aligned) and the rows
    kernel (0: recompute), past the few rows that launch once; LayerNorm's kernels take mean, then rstd, there.
    Up to ONE_LAUNCH_ROWS rows given rstd, the one launch takes them after the weight too."""
    calls, _ = recorded
    shift = 0 if aligned else 2
    rows = bwd_plan.ONE_LAUNCH_ROWS + 1
    p = bwd_plan.plan_norm_backward("bfloat16", 64)
    for rstd in (None, F):
        pyrms.rms_norm_backward(A, B, C + shift, D, E, 1e-5, rows, 64, dtype="bfloat16", rstd=rstd)
        assert calls[0][0] == (p.staged_expression if aligned else p.expression)
        assert calls[0][4][4:7] == (E, rstd or 0, 1e-5)
        calls.clear()
    for mean, rstd in ((None, None), (F, F + 1024)):
        pyrms.layer_norm_backward(A, B, None, C + shift, D, E, 1e-5, rows, 64, dtype="bfloat16", mean=mean, rstd=rstd)
        assert calls[0][4][4:8] == (E, mean or 0, rstd or 0, 1e-5)
        calls.clear()
    # (grad_input, grad_weight, grad_bias, fp32 gradients, grad_output, input, weight, [mean,] rstd, epsilon, rows)
    pyrms.rms_norm_backward(A, B, C + shift, D, E, 1e-5, 4, 64, dtype="bfloat16", rstd=F)
    assert [c[0] for c in calls] == [p.few_expression]
    assert calls[0][4][:11] == (A, B, 0, 0, C + shift, D, E, F, 1e-5, 4, 64)
    calls.clear()
    pyrms.layer_norm_backward(A, B, None, C + shift, D, E, 1e-5, 4, 64, dtype="bfloat16", mean=F, rstd=F + 64)
    assert calls[0][4][:12] == (A, B, 0, 0, C + shift, D, E, F, F + 64, 1e-5, 4, 64)


@pytest.mark.parametrize("in_place", ["grad_output", "input"])
def test_few_rows_in_place_take_the_two_kernels(recorded, in_place):
    """The one launch's column blocks read x and dy while its row blocks write dx: in place, the two kernels run."""
    calls, _ = recorded
    p = bwd_plan.plan_norm_backward("bfloat16", 64)
    dy, x = (A, D) if in_place == "grad_output" else (C, A)
    pyrms.rms_norm_backward(A, B, dy, x, E, 1e-5, 4, 64, dtype="bfloat16", rstd=F)
    kernels = [c[0] for c in calls]
    assert p.few_expression not in kernels and p.sum_expression in kernels

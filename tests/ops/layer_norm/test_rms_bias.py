"""RMSNorm with a bias, without a GPU: layer_norm's rms plan and units, rms_norm_backward's grad_bias plan, and
the twins (the forward is rms_norm's round_once plus the bias; the backward's dx and dweight are those without a
bias, its dbias the chunked sum of dy), each against float64."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import precompile
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward.twin import norm_backward_twin
from pyrms.ops._norm_backward.workspace import backward_workspace_bytes
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm.twin import layer_norm_ref, layer_norm_twin
from pyrms.ops.rms_norm.twin import rms_norm_twin
from pyrms.ops.rms_norm_backward.twin import rms_norm_backward_ref

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def test_the_rms_plan_needs_the_bias_and_is_a_unit_of_its_own():
    with pytest.raises(ValueError, match="rms=True is RMSNorm with a bias: pass the bias"):
        ln_plan.plan_layer_norm("bf16", 4096, bias=False, rms=True)
    rms, ln = ln_plan.plan_layer_norm("bf16", 4096, rms=True), ln_plan.plan_layer_norm("bf16", 4096)
    # LayerNorm's names stay as they were (RMS is a trailing default), RMSNorm's carry it
    assert ln.expression == "pyrms::layer_norm_kernel<__nv_bfloat16, 4, 1, true, false, false>"
    assert rms.expression.endswith(", true>") and "RMS" not in rms.expression
    assert not set(rms.group) & set(ln.group) and len(rms.group) * 2 == len(ln.group)
    units = precompile.every_unit(["layer_norm"], ["bfloat16"])
    labels = [u.label for u in units]
    assert "layer_norm.cu bfloat16 rms" in labels and "layer_norm.cu bfloat16" in labels
    assert len({u.names for u in units}) == len(units)


def test_the_backward_sums_a_bias_only_when_asked():
    plain, biased = bwd_plan.plan_norm_backward("bf16", 4096), bwd_plan.plan_norm_backward("bf16", 4096, grad_bias=True)
    assert (plain.params, biased.params) == (1, 2) and not plain.sums_bias and biased.sums_bias
    assert plain.expression == "pyrms::rms_norm_backward_kernel<__nv_bfloat16, 0, false>"  # unchanged
    assert biased.expression.endswith("__nv_bfloat16, __nv_bfloat16, true>")
    assert biased.staged_expression in plain.group and biased.expression in plain.group  # one compile unit
    assert biased.workspace_bytes(5000) == 2 * plain.workspace_bytes(5000)
    assert backward_workspace_bytes(5000, 4096, grad_bias=True) == 2 * backward_workspace_bytes(5000, 4096)
    assert backward_workspace_bytes(10, 64, weight=False) == 0 < backward_workspace_bytes(10, 64, weight=False,
                                                                                          grad_bias=True)
    # LayerNorm's default is unchanged: grad_bias summed
    assert bwd_plan.plan_norm_backward("bf16", 64, centered=True, weight=False).params == 1
    with pytest.raises(ValueError, match="gemma with a bias"):
        bwd_plan.plan_norm_backward("bf16", 4096, gemma=True, grad_bias=True)
    for weight_dtype, weight in ((None, True), ("float32", True), (None, False)):
        group = bwd_plan.plan_norm_backward("fp16", 64, weight_dtype=weight_dtype, weight=weight).group
        for dy_dtype in (None, "float32") if weight_dtype else (None,):
            p = bwd_plan.plan_norm_backward("fp16", 64, weight_dtype=weight_dtype, weight=weight, grad_bias=True,
                                            grad_output_dtype=dy_dtype)
            assert p.expression in group and p.staged_expression in group


def _inputs(rng, dtype, rows, hidden):
    dt = DTYPES[dtype]
    x = (rng.standard_normal((rows, hidden)) * 2).astype(dt)
    w, b = rng.standard_normal(hidden).astype(dt), rng.standard_normal(hidden).astype(dt)
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 769, 4096])
def test_the_forward_twin_is_round_once_plus_the_bias(rng, dtype, hidden):
    x, w, b = _inputs(rng, dtype, 9, hidden)
    block = ln_plan.plan_layer_norm(dtype, hidden, rms=True).block
    zero = np.zeros(hidden, dtype=DTYPES[dtype])
    plain = rms_norm_twin(x, w, 1e-5, block=block, round_once=True)
    # x * inv * w + 0 is x * inv * w but for the sign of a zero
    assert np.array_equal(layer_norm_twin(x, w, zero, 1e-5, block=block, rms=True).astype(np.float32),
                          plain.astype(np.float32))
    got = layer_norm_twin(x, w, b, 1e-5, block=block, rms=True).astype(np.float64)
    want = layer_norm_ref(x, w, b, 1e-5, rms=True)
    tol = {"bfloat16": 2 ** -7, "float16": 2 ** -10, "float32": 2 ** -22}[dtype]
    assert np.allclose(got, want, rtol=2 * tol, atol=4 * tol * np.abs(want).max())
    # and it is not LayerNorm's
    assert not np.array_equal(got, layer_norm_twin(x, w, b, 1e-5, block=block).astype(np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_the_backward_twin_adds_the_sum_of_dy(rng, dtype, weighted):
    rows, hidden = 70, 769
    x, w, _ = _inputs(rng, dtype, rows, hidden)
    dy = rng.standard_normal((rows, hidden)).astype(DTYPES[dtype])
    w = w if weighted else None
    p = bwd_plan.plan_norm_backward(dtype, hidden, weight=weighted, grad_bias=True)
    kw = dict(block=p.block, fold=p.stats_fold, chunk_rows=p.chunk_rows)
    plain = norm_backward_twin(dy, x, w, 1e-5, **kw)
    biased = norm_backward_twin(dy, x, w, 1e-5, grad_bias=True, **kw)
    assert len(biased) == len(plain) + 1
    for a, b in zip(plain, biased):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    ref = rms_norm_backward_ref(dy, x, w, 1e-5, grad_bias=True)
    assert np.allclose(biased[-1].astype(np.float64), ref[-1], rtol=1e-2, atol=1e-2 * np.abs(ref[-1]).max())
    assert np.allclose(biased[-1].astype(np.float64), dy.astype(np.float64).sum(axis=0), rtol=1e-2,
                       atol=1e-2 * np.abs(ref[-1]).max())

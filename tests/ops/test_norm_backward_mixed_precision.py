"""The backward passes with fp32 master weights beside bf16/fp16 rows, on the CPU: plans and compile units,
the twin against the float64 references (an fp32 weight and an fp32 grad_output read exactly: the same
arithmetic as the rows' dtype would give on the same values), argument validation naming the argument,
and, over the fake driver, which kernel one call launches with which arguments."""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes, reference
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops._norm_backward.spec import backward_option_sets, backward_unit
from pyrms.tensor import Tensor
from tests.support.testing import bits
from tests.support.validation_calls import A, B, C, D, E, backward

MIXED = ("bfloat16", "float16")


# --- plans --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", MIXED)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_plans_with_an_fp32_weight(dtype, layer_norm):
    dt = dtypes.get(dtype)
    same = bwd_plan.plan_norm_backward(dt, 5120, centered=layer_norm)
    fp32 = bwd_plan.plan_norm_backward(dt, 5120, centered=layer_norm, weight_dtype="float32")
    dy32 = bwd_plan.plan_norm_backward(dt, 5120, centered=layer_norm, weight_dtype="float32",
                                       grad_output_dtype="float32")
    # the same trees (block, fold, chunks): only storage differs
    assert {(p.block, p.stats_fold, p.chunk_rows, p.threads) for p in (same, fp32, dy32)} == {
        (same.block, same.stats_fold, same.chunk_rows, same.threads)}
    assert fp32.grad_dtype is dtypes.FLOAT32 and fp32.fp32_weight and not fp32.fp32_grad_output
    kernel = "layer_norm_backward_kernel" if layer_norm else "rms_norm_backward_kernel"
    flags = "" if layer_norm else ", false"
    assert fp32.expression == f"pyrms::{kernel}<{dt.ctype}, 0{flags}, float>"
    assert dy32.expression == (f"pyrms::{kernel}<{dt.ctype}, 0, float, true, float>" if layer_norm
                               else f"pyrms::{kernel}<{dt.ctype}, 0, false, float, float>")
    # a unit of its own (the sums over rows are shared kernels)
    assert fp32.group == dy32.group and {e for e in set(fp32.group) & set(same.group) if "sum_partials" not in e} == set()
    assert {fp32.expression, dy32.expression, fp32.staged_expression, dy32.staged_expression} <= set(fp32.group)
    assert "pyrms::sum_partials_kernel<float>" in fp32.group
    # the staged kernel's shared memory: no fp32 weight (read from global memory), and dy's 4 bytes per slot where fp32
    assert same.staged_shared_bytes(2) - fp32.staged_shared_bytes(2) == 5120 * 2
    assert dy32.staged_shared_bytes(2) - fp32.staged_shared_bytes(2) == 5120 * 2 * 2


def test_plan_refusals_name_the_argument():
    with pytest.raises(ValueError, match="weight_dtype must be float32, got bfloat16"):
        bwd_plan.plan_norm_backward("float32", 64, weight_dtype="bfloat16")
    with pytest.raises(ValueError, match="weight_dtype must be bfloat16 or float32, got float16"):
        bwd_plan.plan_norm_backward("bfloat16", 64, weight_dtype="float16")
    with pytest.raises(ValueError, match="grad_dtype must be float32, got bfloat16"):
        bwd_plan.plan_norm_backward("bfloat16", 64, weight_dtype="float32", grad_dtype="bfloat16")
    with pytest.raises(ValueError, match=r"grad_output_dtype must be bfloat16 \(float32 only beside a float32 weight\), got float32"):
        bwd_plan.plan_norm_backward("bfloat16", 64, grad_output_dtype="float32")
    with pytest.raises(ValueError, match="register-cached backward"):
        bwd_plan.NormBackwardPlan(dtypes.BFLOAT16, 64, 64, 1, False, False, dtypes.FLOAT32, fp32_weight=True)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_every_option_set_has_a_unit(layer_norm):
    unit = backward_unit("op", layer_norm)
    for dt in dtypes.ALL:
        sets = backward_option_sets(layer_norm)(dt)
        assert any(s.get("weight_dtype") == "float32" for s in sets) == (dt is not dtypes.FLOAT32)
        for options in sets:
            u = unit(dt, 64, **options)
            assert u.names and ("weight=float32" in u.label) == (options.get("weight_dtype") == "float32")


# --- the twin against float64 ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", MIXED)
@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("fp32_dy", [False, True])
def test_twin_with_an_fp32_weight_against_float64(rng, dtype, layer_norm, fp32_dy):
    dt = dtypes.get(dtype)
    rows, hidden = 37, 769
    x = rng.uniform(-2, 2, (rows, hidden)).astype(dt.numpy)
    dy = rng.uniform(-1, 1, (rows, hidden)).astype(np.float32 if fp32_dy else dt.numpy)
    w = rng.uniform(-1, 1, hidden).astype(np.float32)  # not representable in the rows' dtype
    p = bwd_plan.plan_norm_backward(dt, hidden, centered=layer_norm, weight_dtype="float32",
                                    grad_output_dtype="float32" if fp32_dy else None)
    got = bwd_twin.norm_backward_twin(dy, x, w, 1e-5, block=p.block, fold=p.stats_fold, weight_phase=5,
                                      chunk_rows=p.chunk_rows, centered=layer_norm)
    ref = (reference.layer_norm_backward_ref if layer_norm else reference.rms_norm_backward_ref)(dy, x, w, 1e-5)
    assert got[0].dtype == dt.numpy and all(g.dtype == np.float32 for g in got[1:])  # dγ (dβ) in the weight's fp32
    np.testing.assert_allclose(got[0].astype(np.float64), ref[0], rtol=2e-2, atol=2e-2)
    for g, r in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=1e-4, atol=1e-3)
    # the weight read exactly: rounding it to the rows' dtype changes the gradients
    rounded = bwd_twin.norm_backward_twin(dy, x, w.astype(dt.numpy), 1e-5, block=p.block, fold=p.stats_fold,
                                          weight_phase=5, chunk_rows=p.chunk_rows, centered=layer_norm,
                                          grad_dtype="float32")
    assert not np.array_equal(bits(rounded[0]), bits(got[0]))


# --- validation -----------------------------------------------------------------------------------------

def test_validation_of_mixed_precision_arguments():
    with pytest.raises(ValueError, match="weight_dtype must be float32, got bfloat16"):
        backward(dtype="float32", weight_dtype="bfloat16")
    with pytest.raises(ValueError, match="grad_weight_dtype must be float32 beside a float32 weight"):
        backward(weight_dtype="float32", grad_weight_dtype="bfloat16")
    with pytest.raises(ValueError, match=r"grad_output_dtype must be bfloat16 \(float32 only beside a float32 weight\), got float32"):
        backward(grad_output_dtype="float32")
    with pytest.raises(ValueError, match="weight_dtype='float32' was given for weight=None"):
        backward(weightless=True, weight_dtype="float32")
    with pytest.raises(ValueError, match=r"grad_input is grad_output \(in place\), but grad_input's dtype bfloat16 "
                                         r"is not grad_output's float32"):
        backward(weight_dtype="float32", grad_output_dtype="float32", grad_output=A)
    # an fp32 weight is 4-byte aligned and hidden * 4 bytes long: its overlaps are counted in its own bytes
    with pytest.raises(ValueError, match="weight"):
        backward(weight_dtype="float32", weight=E + 2)
    with pytest.raises(ValueError, match="overlap"):
        backward(weight_dtype="float32", grad_weight=E + 128)


# --- launches over the fake driver ----------------------------------------------------------------------

@pytest.mark.parametrize("layer_norm", [False, True])
def test_fp32_weight_and_grad_output_arrays_pick_their_kernel(recorded, layer_norm):
    calls, fake = recorded
    rows, hidden = 5000, 64
    dx, x = (Tensor.empty((rows, hidden), "bfloat16") for _ in range(2))
    dy = Tensor.empty((rows, hidden), "float32")
    w, dw, db = (Tensor.empty((hidden,), "float32") for _ in range(3))
    if layer_norm:
        pyrms.layer_norm_backward(dx, dw, db, dy, x, w, 1e-5)
    else:
        pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-5)
    p = bwd_plan.plan_norm_backward("bfloat16", hidden, centered=layer_norm, weight_dtype="float32",
                                    grad_output_dtype="float32")
    staged = not (dx.ptr | dy.ptr | x.ptr) & 15 and not w.ptr & 31
    assert calls[0][0] == (p.staged_expression if staged else p.expression)
    assert [c[0] for c in calls[1:]] == ["pyrms::sum_partials_kernel<float>"] * (1 + layer_norm)
    args = calls[0][4]
    assert (args[0], args[2], args[3], args[4]) == (dx.ptr, dy.ptr, x.ptr, w.ptr)
    assert calls[1][4][0] == dw.ptr and calls[1][4][5] == w.ptr // 4 % 8  # the weight's phase in 32-byte vectors


def test_fp32_weight_raw_pointers_need_weight_dtype(recorded):
    calls, _ = recorded
    pyrms.rms_norm_backward(A, B, C, D, E, 1e-5, 4, 64, dtype="bfloat16", weight_dtype="float32",
                            grad_output_dtype="float32")
    p = bwd_plan.plan_norm_backward("bfloat16", 64, weight_dtype="float32", grad_output_dtype="float32")
    assert calls[0][0] == p.staged_expression  # every pointer 64 KiB-aligned
    calls.clear()
    pyrms.rms_norm_backward(A, B, C, D, E + 16, 1e-5, 4, 64, dtype="bfloat16", weight_dtype="float32")
    p = bwd_plan.plan_norm_backward("bfloat16", 64, weight_dtype="float32")
    assert calls[0][0] == p.expression  # the weight 16 but not 32-byte aligned: its split has a prefix
    assert calls[1][4][5] == 4

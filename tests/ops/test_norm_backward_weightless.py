"""The backward passes without a weight (``weight=None``) on the CPU: plans and workspace
sizes, the twin (bitwise a weighted backward's with a 16-byte aligned weight of ones) and the float64
references, argument validation naming the argument, and, over the fake driver, what one call
launches: the weightless kernel alone, no workspace, where nothing is summed over rows."""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes, reference
from pyrms.tensor import Tensor
from tests.support.testing import bits
from tests.support.validation_calls import A, B, D, E, backward
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin


# --- plans --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hidden", [1, 7, 769, 5120, 5125, 65537])
def test_plans_without_a_weight(hidden):
    for dt in dtypes.ALL:
        weighted = bwd_plan.plan_norm_backward(dt, hidden)
        rms = bwd_plan.plan_norm_backward(dt, hidden, weight=False)
        # the same launch shape and statistics: the same trees as the weighted backward
        assert (rms.block, rms.vectors, rms.stats_fold) == (weighted.block, weighted.vectors, weighted.stats_fold)
        assert rms.expression == f"pyrms::rms_norm_backward_kernel<{dt.ctype}, 0, false, void>"
        assert rms.params == 0 and rms.shared_bytes == 0 and rms.workspace_bytes(70001) == 0
        # the unit holds the sums over rows for its bias variant (RMSNorm with a bias) only: this plan launches none
        biased = bwd_plan.plan_norm_backward(dt, hidden, weight=False, grad_bias=True)
        assert rms.expression in rms.group and biased.expression in rms.group and biased.sum_expression in rms.group
        # its own compile unit: only the sums over rows are in both
        sums = {e for e in weighted.group if e.startswith("pyrms::sum_partials_kernel<")}
        assert sums and set(rms.group) & set(weighted.group) == sums
        ln_bias = bwd_plan.plan_norm_backward(dt, hidden, centered=True, weight=False)
        ln_none = bwd_plan.plan_norm_backward(dt, hidden, centered=True, weight=False, grad_bias=False)
        assert ln_bias.expression == f"pyrms::layer_norm_backward_kernel<{dt.ctype}, 0, void>"  # DBIAS = true: the default
        assert ln_none.expression == f"pyrms::layer_norm_backward_kernel<{dt.ctype}, 0, void, false>"
        assert (ln_bias.params, ln_none.params) == (1, 0)
        assert ln_bias.workspace_bytes(70001) == weighted.workspace_bytes(70001)  # one plane, as RMSNorm's dweight
        assert ln_none.workspace_bytes(70001) == 0 and ln_none.shared_bytes == 0
        assert ln_bias.group == ln_none.group and ln_bias.source == "layer_norm_backward.cu"
        assert ln_bias.expression in ln_bias.group and ln_none.expression in ln_bias.group
        assert ln_bias.sum_expression in ln_bias.group
        # with a weight, LayerNorm's kernel sums dbias whether grad_bias is asked for or not (one variant)
        ln = bwd_plan.plan_norm_backward(dt, hidden, centered=True, grad_bias=False)
        assert ln == bwd_plan.plan_norm_backward(dt, hidden, centered=True, grad_bias=False) and ln.params == 2
        assert ln.expression == bwd_plan.plan_norm_backward(dt, hidden, centered=True).expression


def test_workspace_bytes_without_a_weight():
    assert pyrms.backward_workspace_bytes(4096, 5120, weight=False) == 0
    assert pyrms.backward_workspace_bytes(4096, 5120, layer_norm=True, weight=False, grad_bias=False) == 0
    one_plane = pyrms.backward_workspace_bytes(4096, 5120)
    assert one_plane > 0
    assert pyrms.backward_workspace_bytes(4096, 5120, layer_norm=True, weight=False) == one_plane
    assert pyrms.backward_workspace_bytes(4096, 5120, layer_norm=True) == 2 * one_plane
    assert pyrms.backward_workspace_bytes(4096, 5120, layer_norm=True, grad_bias=False) == 2 * one_plane
    with pytest.raises(TypeError, match="weight must be True or False, got None"):
        pyrms.backward_workspace_bytes(4, 64, weight=None)


def test_gemma_needs_a_weight():
    with pytest.raises(ValueError, match="gemma needs a weight"):
        bwd_plan.plan_norm_backward("bfloat16", 64, gemma=True, weight=False)


# --- the twin and the references -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", dtypes.ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("hidden", [1, 7, 9, 769, 5125])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_twin_without_weight_is_the_weighted_twin_with_aligned_ones(dtype, hidden, layer_norm):
    rng = np.random.default_rng(hidden)
    rows = 37
    x = rng.uniform(-2, 2, (rows, hidden)).astype(dtype.numpy)
    dy = rng.uniform(-1, 1, (rows, hidden)).astype(dtype.numpy)
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=layer_norm, weight=False)
    phases = rng.integers(0, dtype.vec_elems, rows)  # the statistics' order, row by row
    common = dict(block=p.block, fold=p.stats_fold, x_phases=phases, chunk_rows=p.chunk_rows, centered=layer_norm)
    without = bwd_twin.norm_backward_twin(dy, x, None, 1e-5, **common)
    ones = bwd_twin.norm_backward_twin(dy, x, np.ones(hidden, dtype.numpy), 1e-5, weight_phase=0, **common)
    assert len(without) == (2 if layer_norm else 1)  # dx (and dbias): no dweight
    assert np.array_equal(bits(without[0]), bits(ones[0]))
    if layer_norm:
        assert np.array_equal(bits(without[1]), bits(ones[2]))
    # The column split matters: ones at another phase sum in another tree (bf16's 8-bit dx hides it here).
    if hidden >= 2 * dtype.vec_elems and dtype is not dtypes.BFLOAT16:
        shifted = [bwd_twin.norm_backward_twin(dy, x, np.ones(hidden, dtype.numpy), 1e-5, weight_phase=k, **common)[0]
                   for k in range(1, dtype.vec_elems)]
        assert any(not np.array_equal(bits(s), bits(without[0])) for s in shifted)


def test_twin_without_weight_splits_at_phase_zero_only():
    x = np.ones((2, 16), np.float32)
    with pytest.raises(ValueError, match="weight=None splits its columns at phase 0 and has no gemma; got weight_phase=1"):
        bwd_twin.norm_backward_twin(x, x, None, 1e-5, block=32, fold=32, weight_phase=1, chunk_rows=16)
    with pytest.raises(ValueError, match="gemma=True"):
        bwd_twin.norm_backward_twin(x, x, None, 1e-5, block=32, fold=32, chunk_rows=16, gemma=True)


@pytest.mark.parametrize("hidden", [1, 5, 7, 4097])
def test_references_without_weight(hidden):
    rng = np.random.default_rng(hidden)
    x, dy = rng.uniform(-2, 2, (5, hidden)) + 0.5, rng.uniform(-1, 1, (5, hidden))
    ones = np.ones(hidden)
    (dx,) = reference.rms_norm_backward_ref(dy, x, None, 1e-3)
    np.testing.assert_allclose(dx, reference.rms_norm_backward_ref(dy, x, ones, 1e-3)[0], rtol=0, atol=0)
    ln_dx, ln_db = reference.layer_norm_backward_ref(dy, x, None, 1e-3)
    want = reference.layer_norm_backward_ref(dy, x, ones, 1e-3)
    np.testing.assert_allclose(ln_dx, want[0], rtol=0, atol=0)
    np.testing.assert_allclose(ln_db, want[2], rtol=0, atol=0)
    # the gradient of the weightless forward: sum(forward * dy) perturbed along x
    h = 1e-6
    step = rng.uniform(-1, 1, x.shape)
    for forward, got in ((lambda v: rms_twin.rms_norm_ref(v, None, 1e-3), dx),
                         (lambda v: ln_twin.layer_norm_ref(v, None, None, 1e-3), ln_dx)):
        slope = (np.sum(forward(x + h * step) * dy) - np.sum(forward(x - h * step) * dy)) / (2 * h)
        np.testing.assert_allclose(np.sum(got * step), slope, rtol=1e-6, atol=1e-9)
    tolerance = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 2e-5}  # dx rounded once to the dtype
    for dt in dtypes.ALL:  # the twin against float64
        xs, dys = x.astype(dt.numpy), dy.astype(dt.numpy)
        p = bwd_plan.plan_norm_backward(dt, hidden, weight=False)
        (twin_dx,) = bwd_twin.norm_backward_twin(dys, xs, None, 1e-3, block=p.block, fold=p.stats_fold,
                                                  chunk_rows=p.chunk_rows)
        want_dx = reference.rms_norm_backward_ref(dys, xs, None, 1e-3)[0]
        if hidden > 1:  # one element: dx = r * (dy - x_hat^2 * dy) cancels
            err = np.linalg.norm(twin_dx.astype(np.float64) - want_dx) / np.linalg.norm(want_dx)
            assert err < tolerance[dt.name], (dt.name, err)


# --- validation: before any driver call ----------------------------------------------------------------

@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("kwargs, error, message", [
    (dict(grad_weight=D), ValueError, "^grad_weight was given, but weight is None: without a weight there is no weight "
                                      "gradient; pass grad_weight=None$"),
    (dict(grad_weight=Tensor(E, (64,), "bfloat16")), ValueError, "^grad_weight was given, but weight is None"),
    (dict(grad_input=B + 2), ValueError, "grad_input and grad_output overlap"),
    (dict(input=A, grad_input_stride=65), ValueError, "grad_input and input overlap"),
    (dict(epsilon=float("nan")), ValueError, "epsilon must be finite and >= 0"),
    (dict(weight=E, grad_weight=None), TypeError, "grad_weight must be a device pointer .* got None"),
])
def test_validation_names_the_argument(layer_norm, kwargs, error, message):
    with pytest.raises(error, match=message):
        backward(layer_norm, weightless=True, **kwargs)


def test_validation_of_what_has_no_meaning_without_a_weight():
    with pytest.raises(ValueError, match="gemma needs a weight \\(it multiplies by 1 \\+ weight\\); got weight=None"):
        backward(weightless=True, gemma=True)
    with pytest.raises(ValueError, match="^grad_weight_dtype='float32' was given, but no parameter gradient is written "
                                         "\\(weight=None and no grad_bias\\); leave it out$"):
        backward(weightless=True, grad_weight_dtype="float32")
    with pytest.raises(ValueError, match="grad_weight_dtype='float32' was given"):
        backward(True, weightless=True, grad_bias=None, grad_weight_dtype="float32")
    # LayerNorm's grad_bias is checked as with a weight: its dtype, its alignment, its overlaps
    with pytest.raises(ValueError, match="grad_bias dtype must be bfloat16 \\(the dtype\\) or float32, got float16"):
        backward(True, weightless=True, grad_weight_dtype="float16")
    with pytest.raises(ValueError, match="grad_bias pointer .* not aligned to 4 bytes"):
        backward(True, weightless=True, grad_bias=D + 2, grad_weight_dtype="float32")
    with pytest.raises(ValueError, match="grad_input and grad_bias overlap"):
        backward(True, weightless=True, grad_bias=A + 64)
    with pytest.raises(ValueError, match="grad_bias and grad_output overlap"):
        backward(True, weightless=True, grad_bias=B + 8)


# --- launches over the fake driver ----------------------------------------------------------------------

def _pool_allocations(fake) -> list[int]:
    return [args[0] for name, args in fake.calls if name == "cuMemAllocFromPoolAsync"]


@pytest.mark.parametrize("arrays", [False, True])
def test_rms_norm_backward_without_weight_is_one_launch_and_no_workspace(recorded, arrays):
    calls, fake = recorded
    rows, hidden = 40, 5125
    dx, dy, x = (Tensor.empty((rows, hidden), "float16") for _ in range(3))
    if arrays:
        pyrms.rms_norm_backward(dx, None, dy, x, None, 1e-6)
    else:
        pyrms.rms_norm_backward(dx.ptr, None, dy.ptr, x.ptr, None, 1e-6, rows, hidden, dtype="float16")
    p = bwd_plan.plan_norm_backward("float16", hidden, weight=False)
    assert [c[0] for c in calls] == [p.expression]
    _, grid, block, shared, args = calls[0]
    assert (grid, block, shared) == (rows, p.block, 0)  # planned: one row per block for few rows
    named = dict(zip(("grad_input", "partials", "grad_output", "input", "weight"), args))
    assert named == {"grad_input": dx.ptr, "partials": 0, "grad_output": dy.ptr, "input": x.ptr, "weight": 0}
    assert args[-1] == p.stats_fold and args[-2] == 0  # the forward's fold; no sums in shared memory
    assert _pool_allocations(fake) == []


def test_layer_norm_backward_without_weight(recorded):
    calls, fake = recorded
    rows, hidden = 5000, 64  # more than BACKWARD_FEW_ROWS: a chunk of rows per block
    dx, dy, x = (Tensor.empty((rows, hidden), "bfloat16") for _ in range(3))
    # aligned rows take the staged kernel (norm_backward_staged), the others the kernel of the plan's block
    staged = not (dx.ptr | dy.ptr | x.ptr) & 15
    db = Tensor.empty((hidden,), "float32")
    pyrms.layer_norm_backward(dx, None, None, dy, x, None, 1e-5)  # nothing summed: kernel 1 alone
    none = bwd_plan.plan_norm_backward("bfloat16", hidden, centered=True, weight=False, grad_bias=False)
    chunk = none.chunk_for(rows)  # 8: fewer than 512 chunks of 16
    assert [c[0] for c in calls] == [none.staged_expression if staged else none.expression] and \
        calls[0][4][1] == 0 and calls[0][3] == (none.staged_launch(chunk, -(-rows // chunk), 132)[1] if staged else 0)
    assert calls[0][1] == -(-rows // chunk)
    assert _pool_allocations(fake) == []
    calls.clear()
    pyrms.layer_norm_backward(dx, None, db, dy, x, None, 1e-5)  # grad_bias: one plane, one sum (fp32 by the array)
    bias = bwd_plan.plan_norm_backward("bfloat16", hidden, centered=True, weight=False, grad_dtype="float32")
    assert chunk == bias.chunk_for(rows) == 8
    assert [c[0] for c in calls] == [bias.staged_expression if staged else bias.expression,
                                     "pyrms::sum_partials_kernel<float>"]
    assert _pool_allocations(fake) == [pyrms.backward_workspace_bytes(rows, hidden, layer_norm=True, weight=False)]
    workspace = calls[0][4][1]
    assert workspace and calls[0][4][4] == 0 and calls[0][3] == (
        bias.staged_launch(chunk, -(-rows // chunk), 132)[1] if staged else bias.shared_bytes) > 0
    out, plane, n, chunks, ws_stride, phase, group, ws_rows = calls[1][4]
    assert (out, plane, n, chunks, ws_stride, phase) == (db.ptr, workspace, hidden, -(-rows // chunk), bias.ws_stride, 0)


def test_a_workspace_given_without_anything_to_sum_is_checked_and_not_needed(recorded):
    calls, fake = recorded
    dx, dy, x = (Tensor.empty((4, 64), "float32") for _ in range(3))
    buffer = pyrms.DeviceBuffer(16)
    pyrms.rms_norm_backward(dx, None, dy, x, None, 1e-5, workspace=buffer)
    assert calls[0][4][1] == buffer.ptr and _pool_allocations(fake) == []
    with pytest.raises(ValueError, match="workspace pointer .* must be non-null and 16-byte aligned"):
        pyrms.rms_norm_backward(dx, None, dy, x, None, 1e-5, workspace=buffer.ptr + 4)
    buffer.close()

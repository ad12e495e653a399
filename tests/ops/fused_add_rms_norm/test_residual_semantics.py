"""fused_add_rms_norm's two residual semantics without a GPU: the plan (kernels, units, refusals) and
the twin's rules on hand-made values (docs/numerics.md, "Fused residual add")."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import dtypes, precompile, reference
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin

F32, F16, BF16 = np.float32, np.float16, ml_dtypes.bfloat16


def test_the_default_plans_the_rounded_sum_kernel_as_before():
    p = fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, 5120)
    assert (p.sum_precision, p.fp32_residual, p.residual_dtype) == ("rounded", False, dtypes.BFLOAT16)
    assert p.expression == "pyrms::fused_add_rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, false>"
    assert p == fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, 5120, sum_precision="rounded", residual_dtype="bfloat16")


def test_the_fp32_sum_spells_out_weight_and_residual_types():
    p = fused_plan.plan_fused_add_rms_norm(dtypes.FLOAT16, 5120, sum_precision="fp32")
    assert p.expression == "pyrms::fused_add_rms_norm_fp32_sum_kernel<__half, 4, 1, false, false, false, false, __half, __half>"
    q = fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, 5120, residual_dtype="float32", weight_dtype="none")
    assert q.sum_precision == "fp32" and q.residual_dtype is dtypes.FLOAT32  # None picks the fp32 sum
    assert q.latency_expression == ("pyrms::fused_add_rms_norm_fp32_sum_kernel<__nv_bfloat16, 4, 4, false, false, "
                                    "true, false, void, float>")
    # one unit per semantics and residual dtype, launch shapes within it
    units = {precompile.unit("fused_add_rms_norm", dtypes.BFLOAT16, 5120, **o)
             for o in ({}, dict(sum_precision="fp32"), dict(residual_dtype="float32"))}
    assert len(units) == 3 and all(len(u.names) == len(p.group) for u in units)


def test_float32_rows_have_one_semantics():
    rounded = fused_plan.plan_fused_add_rms_norm(dtypes.FLOAT32, 769)
    assert fused_plan.plan_fused_add_rms_norm(dtypes.FLOAT32, 769, sum_precision="fp32") == rounded
    assert fused_plan.plan_fused_add_rms_norm(dtypes.FLOAT32, 769, residual_dtype="float32", sum_precision="fp32") == rounded


@pytest.mark.parametrize("options, message", [
    (dict(sum_precision="bf16"), r"sum_precision must be one of \('rounded', 'fp32'\) \(or None\), got 'bf16'"),
    (dict(sum_precision=True), "sum_precision must be one of"),
    (dict(residual_dtype="float16"), "residual dtype must be bfloat16 .the input's. or float32, got float16"),
    (dict(residual_dtype="float32", sum_precision="rounded"), "sum_precision must be 'fp32' .or None., got 'rounded'"),
])
def test_refusals(options, message):
    with pytest.raises(ValueError, match=message):
        fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, 64, **options)


def _rms_of_two(s, dtype):
    """RMSNorm of a row of two fp32 values, default rounding, no weight: a two-element row has no body
    vector, so the kernel's tree is the exact sum s0^2 + s1^2 of the two fold threads' tail elements."""
    inv = F32(1) / np.sqrt((s[0] * s[0] + s[1] * s[1]) / F32(2))
    return (s * inv).astype(dtype)


def test_twin_rules_on_hand_made_fp16_values():
    # 1.5 + 2^-12 is not an fp16 (its ulp at 1.5 is 2^-10): the rounded sum drops it, the fp32 sum keeps it
    x, r = np.array([[1.5, 1.0]], F16), np.array([[2.0**-12, 0.0]], F16)
    s = x.astype(F32) + r.astype(F32)
    assert s[0, 0] == F32(1.5 + 2.0**-12)
    rounded = fused_twin.fused_add_rms_norm_twin(x, r, None, 0.0, block=32)
    fp32 = fused_twin.fused_add_rms_norm_twin(x, r, None, 0.0, block=32, sum_precision="fp32")
    for out, total in (rounded, fp32):  # both store the sum rounded
        np.testing.assert_array_equal(total, np.array([[1.5, 1.0]], F16))
    np.testing.assert_array_equal(rounded[0], _rms_of_two(s[0].astype(F16).astype(F32), F16)[None])
    np.testing.assert_array_equal(fp32[0], _rms_of_two(s[0], F16)[None])
    assert (rounded[0] != fp32[0]).any()  # 0.7847 against 0.784: the option is not a no-op


def test_twin_rules_for_an_fp32_residual():
    x, r = np.array([[1.0, 3.0]], BF16), np.array([[2.0**-9 + 2.0**-20, -2.0**-7]], F32)
    out, total = fused_twin.fused_add_rms_norm_twin(x, r, None, 0.0, block=32, sum_precision="fp32")
    assert total.dtype == F32
    np.testing.assert_array_equal(total, x.astype(F32) + r)  # stored exactly: bits bf16 has no room for
    np.testing.assert_array_equal(out, _rms_of_two(total[0], BF16)[None])
    with pytest.raises(ValueError, match="sum_precision='fp32'"):
        fused_twin.fused_add_rms_norm_twin(x, r, None, 0.0, block=32)


def test_the_fp32_sums_tree_is_the_row_cores_at_the_inputs_phase():
    """Many vectors: the twin's sum of squares is thread_sums_twin over the fp32 sums, split at the
    input's phase (not the residual's), so a misaligned residual changes nothing but its loads."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (3, 5125)).astype(BF16)
    r = rng.uniform(-2, 2, (3, 5125)).astype(BF16)
    p = fused_plan.plan_fused_add_rms_norm(dtypes.BFLOAT16, 5125, sum_precision="fp32")
    s = x.astype(F32) + r.astype(F32)
    inv = reference.inv_rms_twin(reference.sum_squares_twin(s, p.block, 3, 8), 5125, 1e-6)
    want = reference.scale_twin(s, inv, None, dtypes.BFLOAT16)
    for residual_phase in (0, 5):
        out, _ = fused_twin.fused_add_rms_norm_twin(x, r, None, 1e-6, block=p.block, residual_phases=residual_phase,
                                                   input_phases=3, sum_precision="fp32")
        np.testing.assert_array_equal(out, want)

"""fused_add_rms_norm_quant(sum_precision="fp32") without a GPU: FlashInfer's fused_add_rmsnorm_quant semantics (the
fp32 sum normalized and quantized, the residual storing it rounded). The plans and their kernels (NVRTC, no spills),
the launch it picks, the refusals, and the twin: its arithmetic, and against a float64 spelling of FlashInfer's
formula."""
import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from pyrms.ops.rms_norm_quant import plan as quant_plan
from pyrms.ops.rms_norm_quant import twin as quant_twin
from tests.support.kernel_resources import assert_no_spills, compile_with_report

O, X, R, W, S = 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20  # made-up, 16-byte aligned device addresses
BF16 = dtypes.BFLOAT16


def test_plans_name_the_fp32_sum_kernels():
    """FP32_SUM is a template flag after NORM_OUT in both fused kernels: a unit of its own, the rounded sum's
    expressions (and code) unchanged; float32 rows have one semantics."""
    rounded = quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", residual=True)
    fp32 = quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", residual=True, sum_precision="fp32")
    assert rounded == quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", residual=True,
                                                     sum_precision="rounded")
    assert (rounded.sum_precision, fp32.sum_precision) == ("rounded", "fp32")
    assert fp32.expression == \
        "pyrms::fused_add_rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 0, false, false, true, 4, 1, false, false>"
    assert rounded.expression == fp32.expression.replace("false, true, 4", "false, false, 4")
    assert (fp32.block, fp32.cache, fp32.spread) == (rounded.block, rounded.cache, rounded.spread)
    assert set(fp32.group).isdisjoint(rounded.group) and len(fp32.group) == len(rounded.group)
    group = quant_plan.plan_rms_norm_quant("fp16", 768, "int8", mode="per_group", group=64, residual=True,
                                           norm_out=True, sum_precision="fp32")
    assert group.expression == \
        "pyrms::fused_add_rms_norm_group_quant_kernel<__half, signed char, false, true, true, 4, 1, false, false>"
    for precision in ("rounded", "fp32"):  # float32's sum is never rounded: the rounded sum's kernel
        assert quant_plan.plan_rms_norm_quant("float32", 769, "int8", residual=True, sum_precision=precision) == \
            quant_plan.plan_rms_norm_quant("float32", 769, "int8", residual=True)


@pytest.mark.parametrize("kwargs, message", [
    (dict(residual=True, sum_precision="bf16"), "sum_precision must be one of ('rounded', 'fp32') (or None), got 'bf16'"),
    (dict(residual=True, sum_precision=True), "sum_precision must be one of ('rounded', 'fp32') (or None), got True"),
    (dict(sum_precision="fp32"), "sum_precision applies to fused_add_rms_norm_quant only, got sum_precision='fp32'"),
])
def test_plans_refuse(kwargs, message):
    with pytest.raises(ValueError) as info:
        quant_plan.plan_rms_norm_quant("bf16", 64, "int8", **kwargs)
    assert message in str(info.value)


def test_bad_sum_precision_is_refused_before_a_launch(fake, names_only):
    with pytest.raises(ValueError, match=r"sum_precision must be one of \('rounded', 'fp32'\) \(or None\), got 'fp16'"):
        pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 4, 64, scale=0.5, sum_precision="fp16")
    assert not [c for c in fake.calls if c[0].startswith("cuLaunch")]


def test_fp32_sum_launches_its_kernel(fake, names_only):
    """The same arguments as the rounded sum's; only the kernel differs (FP32_SUM), in every mode."""
    class Every:
        def __contains__(self, name):
            return True

    fake.functions = Every()
    fake.param_kinds = ("ptr",) * 7 + ("f32", "f32", "i32", "i64", "i64", "i64", "i64")
    for precision in (None, "fp32"):
        pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 769, scale=0.5, residual_stride=771,
                                       sum_precision=precision)
        pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 769, scale=S, mode="per_token", sum_precision=precision)
    launches = [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]
    kernels = [fake.kernel_names[args[0]] for args in launches]
    assert kernels == [quant_plan.plan_rms_norm_quant("bf16", 769, "float8_e4m3fn", mode=mode, residual=True,
                                                      sum_precision=precision).latency_expression
                       for precision in (None, "fp32") for mode in ("static", "per_token")]
    assert kernels[0] != kernels[2] and kernels[1] != kernels[3]
    assert launches[0][6] == launches[2][6] == (O, 0, X, R, W, 0, 0, 0.5, pytest.approx(1e-6), 769, 769, 771, 769, 769)
    assert launches[1][6] == launches[3][6]


# --- the twin ------------------------------------------------------------------------------------------------------


def _rows(rng, dtype, rows, hidden, low=-2.0, high=2.0):
    return rng.uniform(low, high, (rows, hidden)).astype(dtypes.get(dtype).numpy)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_twin_normalizes_and_quantizes_the_fp32_sum(dtype):
    rng = np.random.default_rng(11)
    x, r, w = _rows(rng, dtype, 6, 4099), _rows(rng, dtype, 6, 4099), _rows(rng, dtype, 1, 4099, -1, 1)[0]
    sums = x.astype(np.float32) + r.astype(np.float32)
    for mode, options in (("static", dict(scale=0.01)), ("per_token", {}), ("per_group", dict(group=64))):
        if mode == "per_group":
            x, r, w, sums = x[:, :4096], r[:, :4096], w[:4096], sums[:, :4096]
        q, scales, residual = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, "float8_e4m3fn", block=256,
                                                                      input_phases=3, residual_phases=5, mode=mode,
                                                                      sum_precision="fp32", **options)
        # the input's phases split the tree (the residual's do not matter), the dtype's rounding of round_input
        q2, scales2 = quant_twin.rms_norm_quant_twin(sums, w, 1e-6, "float8_e4m3fn", block=256, row_phases=3,
                                                     mode=mode, dtype=dtype, **options)
        assert np.array_equal(q.view(np.uint8), q2.view(np.uint8))
        assert (scales is None and scales2 is None) or np.array_equal(scales, scales2)
        assert residual.dtype == x.dtype and np.array_equal(residual.view(np.uint16), sums.astype(x.dtype).view(np.uint16))
        rounded = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, "float8_e4m3fn", block=256, mode=mode,
                                                           residual_phases=5, **options)
        assert np.array_equal(rounded[2].view(np.uint16), residual.view(np.uint16))  # the same stored residual
        assert not np.array_equal(rounded[0].view(np.uint8), q.view(np.uint8))  # another value quantized
    y = quant_twin.normalized_twin(sums, w, 1e-6, block=256, round_input=True, dtype=dtype)
    assert np.array_equal(y, y.astype(x.dtype).astype(np.float32))  # round_input: rounded as the dtype's rows


def test_twin_of_float32_rows_has_one_semantics():
    rng = np.random.default_rng(5)
    x, r, w = _rows(rng, "float32", 3, 769), _rows(rng, "float32", 3, 769), _rows(rng, "float32", 1, 769)[0]
    a = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, "int8", block=64, scale=0.02, residual_phases=1)
    b = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, "int8", block=64, scale=0.02, residual_phases=1,
                                                 input_phases=2, sum_precision="fp32")
    assert all(np.array_equal(u, v) for u, v in zip((a[0], a[2]), (b[0], b[2])))
    with pytest.raises(ValueError, match="sum_precision must be one of"):
        quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, "int8", block=64, scale=0.02, sum_precision="fp64")


def flashinfer_fused_add_rmsnorm_quant(x, residual, weight, scale, eps, out_dtype):
    """FlashInfer's fused_add_rmsnorm_quant (include/flashinfer/norm.cuh, FusedAddRMSNormQuantKernel), spelled in
    float64: s = float(x) + float(residual) in fp32 (its one fp32 rounding, which the stored residual and the
    normalization share); residual <- T(s); out = clamp(s * rsqrt(mean(s^2) + eps) * weight * (1 / scale),
    -qmax, qmax), cast to fp8 (round to nearest even)."""
    s = x.astype(np.float32) + residual.astype(np.float32)
    s64 = s.astype(np.float64)
    rms_rcp = 1.0 / np.sqrt(np.mean(s64 * s64, axis=1, keepdims=True) + eps)
    qmax = float(ml_dtypes.finfo(out_dtype).max)
    y = np.clip(s64 * rms_rcp * weight.astype(np.float64) * (1.0 / scale), -qmax, qmax)
    return y.astype(out_dtype), s.astype(x.dtype)


def _fp8_steps_apart(a, b) -> np.ndarray:
    """How many representable values lie between fp8 values a and b (0: the same; 1: neighbours), by their
    ordered codes (sign-magnitude to an ordered integer line)."""
    def ordered(v):
        code = v.view(np.uint8).astype(np.int64)
        return np.where(code & 0x80, -(code & 0x7F), code)
    return np.abs(ordered(a) - ordered(b))


@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_twin_is_flashinfers_formula(dtype, out_dtype):
    """The twin against the float64 spelling of FlashInfer's formula: the residual bit for bit, every output
    within one fp8 step (the fp32 roundings of the product and pyrms's correctly rounded 1/sqrt against float64),
    nearly all the same code; and the rounded sum's semantics (vLLM's) further from it."""
    rng = np.random.default_rng(7)
    x, r, w = _rows(rng, dtype, 8, 5120, -4, 4), _rows(rng, dtype, 8, 5120, -4, 4), _rows(rng, dtype, 1, 5120, -1, 1)[0]
    qt = dtypes.quantized(out_dtype)
    scale = float(np.float32(1.5 / float(qt.qmax)))  # the largest outputs past qmax: the clamp is reached
    expected, expected_residual = flashinfer_fused_add_rmsnorm_quant(x, r, w, scale, 1e-6, qt.numpy)
    q, _, residual = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, qt, block=160, scale=scale,
                                                              sum_precision="fp32")
    assert np.array_equal(residual.view(np.uint16), expected_residual.view(np.uint16))
    apart = _fp8_steps_apart(q, expected)
    assert apart.max() <= 1 and np.mean(apart == 0) > 0.999
    assert np.any(np.abs(expected.astype(np.float32)) == float(ml_dtypes.finfo(qt.numpy).max))  # the clamp was reached
    rounded, _, _ = quant_twin.fused_add_rms_norm_quant_twin(x, r, w, 1e-6, qt, block=160, scale=scale)
    assert np.sum(_fp8_steps_apart(rounded, expected) > 0) > np.sum(apart > 0)


# --- the kernels -------------------------------------------------------------------------------------------------


# One unit in the plain run, the others with -m slow: each compiles 14 kernels (5 to 15 s).
@pytest.mark.parametrize("dtype, out_dtype, mode, options", [
    ("bfloat16", "float8_e4m3fn", "per_token", {}),
    pytest.param("float16", "int8", "static", dict(norm_out=True, round_input=True), marks=pytest.mark.slow),
    pytest.param("bfloat16", "float8_e5m2", "per_group", dict(norm_out=True), marks=pytest.mark.slow),
    pytest.param("float16", "float8_e4m3fn", "per_token", dict(norm_out=True), marks=pytest.mark.slow),
])
def test_fp32_sum_kernels_compile_without_spills(dtype, out_dtype, mode, options):
    """Every CACHE/shape variant of an FP32_SUM unit: no spills, no stack; the residual stored in the dtype after a
    barrier (the stores of 16-byte vectors), every division correctly rounded."""
    p = quant_plan.plan_rms_norm_quant(dtype, 7168, out_dtype, mode=mode, residual=True, sum_precision="fp32",
                                       group=64 if mode == "per_group" else None, **options)
    program = compile_with_report(p.source, p.group)
    assert_no_spills(program, p.group)
    ptx = program.ptx
    assert "st.global.v4.u32" in ptx and "bar.sync" in ptx
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx

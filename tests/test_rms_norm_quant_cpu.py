"""pyrms.rms_norm_quant and fused_add_rms_norm_quant without a GPU: the plans, the kernels compiled by NVRTC
(their PTX quantizes and stores as intended), the launches' packed arguments (through the fake driver), and
every refusal before a launch."""
import math
import struct

import numpy as np
import pytest

import pyrms
from pyrms import compiler, dtypes, plan, reference

O, X, R, W, S = 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20  # made-up, 16-byte aligned device addresses
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]


def test_plans_follow_rms_norm_and_name_their_kernels():
    p = plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn")
    base = plan.plan_rms_norm("bf16", 5120)
    assert (p.block, p.cache, p.spread) == (base.block, base.cache, base.spread)  # rms_norm's tree: same inv_rms
    assert p.expression == "pyrms::rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 0, false, 4, 1, false, false>"
    f = plan.plan_rms_norm_quant("fp16", 9, "int8", mode="per_token", round_input=True, residual=True)
    assert f.aligned_latency_expression == \
        "pyrms::fused_add_rms_norm_quant_kernel<__half, signed char, 1, true, 1, 1, true, true>"
    assert len(p.group) == len(set(p.group)) == 14 and p.expression in p.group and p.latency_expression in p.group
    with pytest.raises(ValueError, match="mode must be one of"):
        plan.plan_rms_norm_quant("bf16", 8, "int8", mode="per_group")
    with pytest.raises(ValueError, match="quantized output dtype 'float16' is not supported"):
        plan.plan_rms_norm_quant("bf16", 8, "float16")


@pytest.mark.parametrize("out_dtype", QUANT)
def test_kernels_compile_and_store_through_their_conversions(out_dtype):
    """Every CACHE/shape variant of one unit compiles; the PTX converts with the saturating cvt and stores
    8-byte output vectors beside bf16 rows (Vec<T>::N one-byte elements)."""
    p = plan.plan_rms_norm_quant("bf16", 5120, out_dtype, mode="per_token")
    ptx = compiler.compile_source(p.source, arch="sm_90", name_expressions=p.group, use_cache=False,
                                  want_ptx=True).ptx
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    cvt = {"float8_e4m3fn": "cvt.rn.satfinite.e4m3x2.f32", "float8_e5m2": "cvt.rn.satfinite.e5m2x2.f32",
           "int8": "cvt.rni.sat.s8.f32"}[out_dtype]
    assert cvt in ptx
    assert "st.global.cs.v2.u32" in ptx  # the body's output vectors
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx


def test_twin_quantizes_the_normalized_rows():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (3, 37)).astype(dtypes.BFLOAT16.numpy)
    w = rng.uniform(-1, 1, 37).astype(dtypes.BFLOAT16.numpy)
    y = reference.normalized_twin(x, w, 1e-6, block=32)
    xf = x.astype(np.float32)
    inv = reference.row_stats_twin(xf, 1e-6, 32, 0, 8)[1]
    assert np.array_equal(y, (xf * inv[:, None]) * w.astype(np.float32))
    rounded = reference.normalized_twin(x, w, 1e-6, block=32, round_input=True)
    assert np.array_equal(rounded, reference.rms_norm_twin(x, w, 1e-6, block=32).astype(np.float32))
    q, scales = reference.rms_norm_quant_twin(x, w, 1e-6, "int8", block=32, mode="per_token")
    assert np.array_equal(scales, np.maximum(np.abs(y).max(axis=1) / np.float32(127), np.float32(2**-23)))
    assert np.abs(q.astype(np.int64)).max() == 127
    q2, none, total = reference.fused_add_rms_norm_quant_twin(x, x, w, 1e-6, "float8_e4m3fn", block=32, scale=0.01)
    assert none is None and np.array_equal(total, (xf + xf).astype(x.dtype))
    assert np.array_equal(q2.view(np.uint8),
                          reference.quantize_static(reference.normalized_twin(total, w, 1e-6, block=32), 0.01,
                                                    "float8_e4m3fn").view(np.uint8))


class _Every:
    """The fake's function names: every kernel the ops look up (NVRTC's lowered names)."""

    def __contains__(self, name):
        return True


@pytest.fixture
def qfake(fake):
    fake.functions = _Every()
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def test_launch_arguments(qfake):
    fake = qfake
    fake.param_kinds = ("ptr",) * 5 + ("f32", "f32", "i32", "i64", "i64")
    pyrms.rms_norm_quant(O + 3, X, W, 1e-6, 4, 5120, scale=0.5, out_stride=5123)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 300, 1024, scale=S, out_dtype="int8")  # a device scale; many rows
    pyrms.rms_norm_quant(O, X, W, 1e-6, 2, 5120, scale=S, mode="per_token", scale_ub=2.5)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 2, 5120, scale=S, mode="per_token", out_dtype="float8_e5m2")
    first, many, ub, none = _launches(fake)
    assert first[1:3] == ((4, 1, 1), (640, 1, 1)) and first[6] == (O + 3, X, W, 0, 0, 0.5, pytest.approx(1e-6),
                                                                        5120, 5120, 5123)
    assert many[1:3] == ((300, 1, 1), (32, 1, 1)) and many[6][3:6] == (0, S, 1.0)
    assert ub[6][3:6] == (S, 0, 2.5) and none[6][3:6] == (S, 0, math.inf)
    fake.param_kinds = ("ptr",) * 6 + ("f32", "f32", "i32", "i64", "i64", "i64")
    pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 769, scale=S + 4, mode="per_token", residual_stride=771,
                                   scale_ub=W + 4096)
    (fused,) = _launches(fake)[4:]
    assert fused[6] == (O, X, R, W, S + 4, W + 4096, 1.0, pytest.approx(1e-6), 769, 769, 771, 769)


def call(fused=False, **overrides):
    args = dict(out=O, input=X, weight=W, epsilon=1e-6, num_tokens=4, hidden_size=64, scale=0.5)
    if fused:
        args["residual"] = R
    args.update(overrides)
    head = [args.pop(k) for k in ("out", "input", *(("residual",) if fused else ()), "weight", "epsilon", "num_tokens",
                                  "hidden_size")]
    return (pyrms.fused_add_rms_norm_quant if fused else pyrms.rms_norm_quant)(*head, **args)


BAD = [
    (dict(scale=0.0), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=-1.0), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.nan), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.inf), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=1e-46), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=1e39), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=None), TypeError, "scale must be a float or a device pointer (int), got NoneType"),
    (dict(scale="1"), TypeError, "scale must be a float or a device pointer (int), got str"),
    (dict(scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4 bytes, as its float32"),
    (dict(scale=O + 60), ValueError, "out and scale overlap; they must be disjoint"),
    (dict(mode="per_token", scale=0.5), TypeError, "scale must be a device pointer (int) to num_tokens float32"),
    (dict(mode="per_token", scale=O + 64), ValueError, "out and scale overlap"),
    (dict(mode="per_token", scale=S, scale_ub=0.0), ValueError, "scale_ub must be finite and > 0"),
    (dict(mode="per_token", scale=S, scale_ub=math.nan), ValueError, "scale_ub must be finite and > 0"),
    (dict(mode="per_token", scale=S, scale_ub=2.0, out_dtype="int8"), ValueError, "scale_ub applies to float8"),
    (dict(mode="per_token", scale=S, scale_ub=S + 64, out_dtype="int8"), ValueError, "scale_ub applies to float8"),
    (dict(scale_ub=2.0), ValueError, "scale_ub applies to mode='per_token' only"),
    (dict(mode="per_group"), ValueError, "mode must be one of ('static', 'per_token')"),
    (dict(out_dtype="bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(out=3.5), TypeError, "out must be a device pointer (int) (arrays for out are not supported yet)"),
    (dict(out=X + 100), ValueError, "out and input overlap; they must be disjoint"),
    (dict(out=W - 4 * 64 + 8), ValueError, "out and weight overlap"),
    (dict(input=X + 1), ValueError, "input pointer 0x200001 is not aligned to 2 bytes, as its bfloat16"),
    (dict(weight=W + 2, dtype="float32"), ValueError, "weight pointer 0x400002 is not aligned to 4 bytes"),
    (dict(epsilon=-1.0), ValueError, "epsilon must be finite and >= 0"),
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(out_stride=63), ValueError, "out_stride must be >= hidden_size (64)"),
    (dict(round_input=1), TypeError, "round_input must be True or False, got 1"),
    (dict(pdl="yes"), TypeError, "pdl must be True or False"),
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("overrides, exc, message", BAD)
def test_bad_arguments_are_refused(overrides, exc, message, fused):
    with pytest.raises(exc) as info:
        call(fused=fused, **overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    (dict(residual=X + 64), "input and residual overlap"),
    (dict(residual=O), "out and residual overlap"),
    (dict(residual=R + 1), "residual pointer 0x300001 is not aligned to 2 bytes"),
    (dict(residual_stride=8), "residual_stride must be >= hidden_size (64)"),
])
def test_bad_fused_arguments_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(fused=True, **overrides)


def test_valid_arguments_reach_the_driver(qfake):
    """What the refusals above change, undone, launches (each case differs from a valid call in one way)."""
    fake = qfake
    fake.param_kinds = ("ptr",)
    call(scale=1e-30)
    call(mode="per_token", scale=S, scale_ub=3.0, out=O + 1, out_stride=67)
    call(fused=True, mode="per_token", scale=S, out_dtype="int8")
    assert len(_launches(fake)) == 3
    assert struct.pack("<f", 1e-30) != b"\0\0\0\0"

"""pyrms.rms_norm_quant and fused_add_rms_norm_quant without a GPU: the plans, the kernels compiled by NVRTC
(their PTX quantizes and stores as intended), the launches' packed arguments (through the fake driver), and
every refusal before a launch."""
import importlib
import math
import re
import struct

import numpy as np
import pytest

import pyrms
from tests.support.hostile_cases import FakeArray, TorchLikeTensor
from pyrms import compiler, driver, dtypes, reference
from pyrms.tensor import Tensor
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops.rms_norm_quant import plan as quant_plan
from pyrms.ops.rms_norm_quant import twin as quant_twin

quant_module = importlib.import_module("pyrms.ops.rms_norm_quant.op")

O, X, R, W, S = 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20  # made-up, 16-byte aligned device addresses
N = 9 << 20  # a norm_out
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]


def test_plans_follow_rms_norm_and_name_their_kernels():
    p = quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn")
    base = rms_plan.plan_rms_norm("bf16", 5120)
    assert (p.block, p.cache, p.spread) == (base.block, base.cache, base.spread)  # rms_norm's tree: same inv_rms
    assert p.expression == "pyrms::rms_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 0, false, false, 4, 1, false, false>"
    f = quant_plan.plan_rms_norm_quant("fp16", 9, "int8", mode="per_token", round_input=True, residual=True)
    assert f.aligned_latency_expression == \
        "pyrms::fused_add_rms_norm_quant_kernel<__half, signed char, 1, true, false, false, 1, 1, true, true>"
    assert len(p.group) == len(set(p.group)) == 14 and p.expression in p.group and p.latency_expression in p.group
    with pytest.raises(ValueError, match="mode must be one of"):
        quant_plan.plan_rms_norm_quant("bf16", 8, "int8", mode="per_block")
    with pytest.raises(ValueError, match="quantized output dtype 'float16' is not supported"):
        quant_plan.plan_rms_norm_quant("bf16", 8, "float16")


def test_per_group_plans_use_the_group_kernels():
    """per_group: the same row (block, cache) and unit size, its own entry point without MODE; the group size is
    a run-time argument (group_shift), so one unit serves 64 and 128."""
    g = quant_plan.plan_rms_norm_quant("bf16", 7168, "float8_e4m3fn", mode="per_group")
    base = rms_plan.plan_rms_norm("bf16", 7168)
    assert (g.block, g.cache, g.group_size, g.group_shift) == (base.block, base.cache, 128, 7)
    assert g.expression == "pyrms::rms_norm_group_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, false, false, 4, 1, false, false>"
    f = quant_plan.plan_rms_norm_quant("float32", 64, "int8", mode="per_group", group=64, residual=True, round_input=True)
    assert f.aligned_latency_expression == \
        "pyrms::fused_add_rms_norm_group_quant_kernel<float, signed char, true, false, false, 1, 1, true, true>"
    assert f.group_shift == 6 and len(f.group) == 14
    assert quant_plan.plan_rms_norm_quant("bf16", 1024, "int8", mode="per_group", group=64).group == \
        quant_plan.plan_rms_norm_quant("bf16", 4096, "int8", mode="per_group").group
    assert quant_plan.plan_rms_norm_quant("bf16", 65536, "int8", mode="per_group", group=64).group_size == 64


@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden=64, group=32), "group_size must be one of (64, 128), got 32"),
    (dict(hidden=128, group=128.0), "group_size must be one of (64, 128), got 128.0"),
    (dict(hidden=192), "multiple of group_size 128"),
    (dict(hidden=96, group=64), "multiple of group_size 64"),
    (dict(hidden=65536 + 64, group=64), "at most 1024 groups (65536 elements)"),
    (dict(hidden=128, mode="per_token", group=128), "group_size applies to mode='per_group' only"),
])
def test_per_group_plans_refuse(kwargs, message):
    kwargs.setdefault("mode", "per_group")
    hidden = kwargs.pop("hidden")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        quant_plan.plan_rms_norm_quant("bf16", hidden, "int8", **kwargs)


# One unit of each test in the plain run (float8_e4m3fn here, int8 below), the others with -m slow: each compiles a
# unit of 14 kernels (3 to 7 s).
@pytest.mark.parametrize("out_dtype", [QUANT[0], *(pytest.param(q, marks=pytest.mark.slow) for q in QUANT[1:])])
def test_kernels_compile_and_store_through_their_conversions(out_dtype):
    """Every CACHE/shape variant of one unit compiles; the PTX converts with the saturating cvt and stores
    8-byte output vectors beside bf16 rows (Vec<T>::N one-byte elements)."""
    p = quant_plan.plan_rms_norm_quant("bf16", 5120, out_dtype, mode="per_token")
    ptx = compiler.compile_source(p.source, arch="sm_90", name_expressions=p.group, use_cache=False,
                                  want_ptx=True).ptx
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    cvt = {"float8_e4m3fn": "cvt.rn.satfinite.e4m3x2.f32", "float8_e5m2": "cvt.rn.satfinite.e5m2x2.f32",
           "int8": "cvt.rni.sat.s8.f32"}[out_dtype]
    assert cvt in ptx
    assert "st.global.cs.v2.u32" in ptx  # the body's output vectors
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx


@pytest.mark.parametrize("dtype, out_dtype, residual", [
    pytest.param("bfloat16", "float8_e4m3fn", False, marks=pytest.mark.slow), ("float32", "int8", True)])
def test_group_kernels_compile(dtype, out_dtype, residual):
    """The group kernels of one unit compile: the segmented butterfly of the group maxima, the group's scale
    stored, the conversions and 8- or 4-byte output vectors, every division correctly rounded."""
    p = quant_plan.plan_rms_norm_quant(dtype, 7168, out_dtype, mode="per_group", residual=residual)
    ptx = compiler.compile_source(p.source, arch="sm_90", name_expressions=p.group, use_cache=False,
                                  want_ptx=True).ptx
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    assert "shfl.sync.bfly.b32" in ptx and "max.f32" in ptx
    assert ("cvt.rni.sat.s8.f32" if out_dtype == "int8" else "cvt.rn.satfinite.e4m3x2.f32") in ptx
    assert ("st.global.u32" if dtype == "float32" else "st.global.cs.v2.u32") in ptx
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx
    assert not re.search(r"^\s*(atom|red)\.", ptx, re.M)  # the maxima are exact without atomics


def _group_walk(n, group, vec, pre):
    """group_amax's assignment of a row's elements (rms_norm_quant.cu), modeled: the group each element
    counts in, by the path that takes it (body vector, spill to the next group, prefix, tail)."""
    shift, vshift = group.bit_length() - 1, (group // vec).bit_length() - 1
    v_per_group = group // vec
    vectors = (n - pre) // vec
    tail = pre + vectors * vec
    counted = {}
    for v in range(vectors):
        at = pre + v * vec
        kept = (((v >> vshift) + 1) << shift) - at
        for j in range(vec):
            if j < kept:
                counted.setdefault(at + j, []).append(v >> vshift)
            else:  # written by the vector group's last lane, only where the row has a prefix
                assert v & (v_per_group - 1) == v_per_group - 1 and pre > 0
                counted.setdefault(at + j, []).append((v >> vshift) + 1)
    for i in range(pre):
        counted.setdefault(i, []).append(0)
    for i in range(tail, n):
        counted.setdefault(i, []).append(n // group - 1)
    return counted


@pytest.mark.parametrize("vec", [4, 8])
@pytest.mark.parametrize("group", [64, 128])
def test_group_walk_counts_each_element_once_in_its_own_group(vec, group):
    """Every element of every split (each prefix length a row's phase gives) is counted exactly once, in
    group i // group: groups start at element indices, not at the vector split."""
    for groups in (1, 2, 3, 7):
        n = groups * group
        for pre in range(vec):
            counted = _group_walk(n, group, vec, pre)
            assert sorted(counted) == list(range(n))
            assert all(where == [i // group] for i, where in counted.items())
            assert pre == 0 or (n - pre) % vec == vec - pre  # a prefix comes with a tail, both shorter than a vector


def test_twin_quantizes_the_normalized_rows():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (3, 37)).astype(dtypes.BFLOAT16.numpy)
    w = rng.uniform(-1, 1, 37).astype(dtypes.BFLOAT16.numpy)
    y = quant_twin.normalized_twin(x, w, 1e-6, block=32)
    xf = x.astype(np.float32)
    inv = reference.row_stats_twin(xf, 1e-6, 32, 0, 8)[1]
    assert np.array_equal(y, (xf * inv[:, None]) * w.astype(np.float32))
    rounded = quant_twin.normalized_twin(x, w, 1e-6, block=32, round_input=True)
    assert np.array_equal(rounded, rms_twin.rms_norm_twin(x, w, 1e-6, block=32).astype(np.float32))
    # norm_out = round_T(y): rms_norm's output with round_once where y is not rounded
    # (tests.ops.rms_norm_quant.cases.check_rms_norm_quant)
    once = rms_twin.rms_norm_twin(x, w, 1e-6, block=32, round_once=True)
    assert np.array_equal(y.astype(x.dtype).view(np.uint16), once.view(np.uint16))
    assert not np.array_equal(once.view(np.uint16), rms_twin.rms_norm_twin(x, w, 1e-6, block=32).view(np.uint16))
    q, scales = quant_twin.rms_norm_quant_twin(x, w, 1e-6, "int8", block=32, mode="per_token")
    assert np.array_equal(scales, np.maximum(np.abs(y).max(axis=1) / np.float32(127), np.float32(2**-23)))
    assert np.abs(q.astype(np.int64)).max() == 127
    q2, none, total = quant_twin.fused_add_rms_norm_quant_twin(x, x, w, 1e-6, "float8_e4m3fn", block=32, scale=0.01)
    assert none is None and np.array_equal(total, (xf + xf).astype(x.dtype))
    assert np.array_equal(q2.view(np.uint8),
                          quant_twin.quantize_static(quant_twin.normalized_twin(total, w, 1e-6, block=32), 0.01,
                                                    "float8_e4m3fn").view(np.uint8))


class _Every:
    """The fake's function names: every kernel the ops look up (NVRTC's lowered names)."""

    def __contains__(self, name):
        return True


@pytest.fixture
def qfake(fake, names_only):
    fake.functions = _Every()
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def test_launch_arguments(qfake):
    fake = qfake
    fake.param_kinds = ("ptr",) * 6 + ("f32", "f32", "i32", "i64", "i64", "i64")
    pyrms.rms_norm_quant(O + 3, X, W, 1e-6, 4, 5120, scale=0.5, out_stride=5123)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 300, 1024, scale=S, out_dtype="int8")  # a device scale; many rows
    pyrms.rms_norm_quant(O, X, W, 1e-6, 2, 5120, scale=S, mode="per_token", scale_ub=2.5)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 2, 5120, scale=S, mode="per_token", out_dtype="float8_e5m2")
    first, many, ub, none = _launches(fake)
    # norm_out (none here: 0) second, its stride (hidden) last
    assert first[1:3] == ((4, 1, 1), (640, 1, 1)) and first[6] == (O + 3, 0, X, W, 0, 0, 0.5, pytest.approx(1e-6),
                                                                        5120, 5120, 5123, 5120)
    assert many[1:3] == ((300, 1, 1), (32, 1, 1)) and many[6][4:7] == (0, S, 1.0)
    assert ub[6][4:7] == (S, 0, 2.5) and none[6][4:7] == (S, 0, math.inf)
    fake.param_kinds = ("ptr",) * 7 + ("f32", "f32", "i32", "i64", "i64", "i64", "i64")
    pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 769, scale=S + 4, mode="per_token", residual_stride=771,
                                   scale_ub=W + 4096)
    (fused,) = _launches(fake)[4:]
    assert fused[6] == (O, 0, X, R, W, S + 4, W + 4096, 1.0, pytest.approx(1e-6), 769, 769, 771, 769, 769)


def test_norm_out_launch_arguments(qfake):
    """norm_out is the kernels' second pointer and its stride their last argument, whatever comes between:
    a device scale, per-token's scale_ub, per group's layout; its kernels are the NORM_OUT ones."""
    fake = qfake
    fake.param_kinds = ("ptr",) * 6 + ("f32", "f32", "i32", "i64", "i64", "i64")
    pyrms.rms_norm_quant(O, X, W, 1e-6, 4, 5120, scale=S, norm_out=N + 2, norm_out_stride=5130)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 4, 5120, scale=S, mode="per_token", scale_ub=S + 64, norm_out=N)
    static, ub = _launches(fake)
    assert static[6] == (O, N + 2, X, W, 0, S, 1.0, pytest.approx(1e-6), 5120, 5120, 5120, 5130)
    assert ub[6] == (O, N, X, W, S, S + 64, 1.0, pytest.approx(1e-6), 5120, 5120, 5120, 5120)
    fake.param_kinds = ("ptr",) * 6 + ("i64", "i64", "f32", "i32", "i32", "i32", "i64", "i64", "i64", "i64")
    pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 768, scale=S, mode="per_group", group_size=64, norm_out=N,
                                   norm_out_stride=800)
    (fused,) = _launches(fake)[2:]
    assert fused[6] == (O, N, X, R, W, S, 12, 1, pytest.approx(1e-6), 6, 0, 768, 768, 768, 768, 800)
    assert {p.norm_out for p in quant_module._prepared.of(driver.selected_device()).values()} == {True}


def test_norm_out_plans_name_their_own_kernels():
    """NORM_OUT is a template flag after ROUND_INPUT: its kernels are a unit of their own, and the others'
    expressions (and so their code) do not change."""
    p = quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", mode="per_group", norm_out=True)
    assert p.expression == "pyrms::rms_norm_group_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, false, true, 4, 1, false, false>"
    plain = quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", mode="per_group")
    assert set(p.group).isdisjoint(plain.group) and len(p.group) == len(plain.group)


def test_per_group_launch_arguments(qfake):
    """The group kernels' arguments: scales, their row and group strides (row-major: groups and 1; column-major:
    1 and num_tokens, or scale_stride), epsilon; the tail group_shift, ue8m0, hidden and the row strides."""
    fake = qfake
    fake.param_kinds = ("ptr",) * 5 + ("i64", "i64", "f32", "i32", "i32", "i32", "i64", "i64", "i64")
    pyrms.rms_norm_quant(O + 3, X, W, 1e-6, 4, 7168, scale=S, mode="per_group")
    pyrms.rms_norm_quant(O, X, W, 1e-6, 300, 1024, scale=S + 4, mode="per_group", group_size=64,
                         column_major_scales=True, ue8m0=True, out_dtype="int8")
    pyrms.rms_norm_quant(O, X, W, 1e-6, 5, 1024, scale=S, mode="per_group", column_major_scales=True, scale_stride=8)
    pyrms.rms_norm_quant(O, X, W, 1e-6, 5, 1024, scale=S, mode="per_group", scale_stride=10, out_stride=1030)
    few, many, padded, strided = _launches(fake)
    assert few[6] == (O + 3, 0, X, W, S, 56, 1, pytest.approx(1e-6), 7, 0, 7168, 7168, 7168, 7168)
    assert many[1:3] == ((300, 1, 1), (rms_plan.plan_rms_norm("bf16", 1024).block, 1, 1))
    assert many[6][4:] == (S + 4, 1, 300, pytest.approx(1e-6), 6, 1, 1024, 1024, 1024, 1024)
    assert padded[6][4:7] == (S, 1, 8) and strided[6][4:7] == (S, 10, 1) and strided[6][-2] == 1030
    fake.param_kinds = ("ptr",) * 6 + ("i64", "i64", "f32", "i32", "i32", "i32", "i64", "i64", "i64", "i64")
    pyrms.fused_add_rms_norm_quant(O, X, R, W, 1e-6, 2, 768, scale=S, mode="per_group", group_size=64,
                                   residual_stride=771)
    (fused,) = _launches(fake)[4:]
    assert fused[6] == (O, 0, X, R, W, S, 12, 1, pytest.approx(1e-6), 6, 0, 768, 768, 771, 768, 768)


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
    (dict(scale=None), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                  "got NoneType"),
    (dict(scale="1"), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                 "got str"),
    (dict(scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4 bytes, as its float32"),
    (dict(scale=O + 60), ValueError, "out and scale overlap; they must be disjoint"),
    (dict(mode="per_token", scale=0.5), TypeError,
     "scale must be a device pointer (int) to num_tokens float32, or a float32 array of them, got float"),
    (dict(mode="per_token", scale=O + 64), ValueError, "out and scale overlap"),
    (dict(mode="per_token", scale=S, scale_ub=0.0), ValueError, "scale_ub must be finite and > 0"),
    (dict(mode="per_token", scale=S, scale_ub=math.nan), ValueError, "scale_ub must be finite and > 0"),
    (dict(mode="per_token", scale=S, scale_ub=2.0, out_dtype="int8"), ValueError, "scale_ub applies to float8"),
    (dict(mode="per_token", scale=S, scale_ub=S + 64, out_dtype="int8"), ValueError, "scale_ub applies to float8"),
    (dict(scale_ub=2.0), ValueError, "scale_ub applies to mode='per_token' only"),
    (dict(mode="per_block"), ValueError, "mode must be one of ('static', 'per_token', 'per_group')"),
    (dict(mode="per_group", scale=S), ValueError, "per_group needs hidden_size a multiple of group_size 128"),
    (dict(mode="per_group", scale=S, group_size=32), ValueError, "group_size must be one of (64, 128), got 32"),
    (dict(scale=S, group_size=64), ValueError, "group_size applies to mode='per_group' only"),
    (dict(mode="per_token", scale=S, ue8m0=True), ValueError, "ue8m0, column_major_scales and scale_stride apply to"),
    (dict(column_major_scales=True), ValueError, "ue8m0, column_major_scales and scale_stride apply to mode="),
    (dict(scale_stride=4), ValueError, "ue8m0, column_major_scales and scale_stride apply to mode='per_group'"),
    (dict(mode="per_group", group_size=64, scale=0.5), TypeError,
     "scale must be a device pointer (int) to the per-group float32 scales, or a float32 (num_tokens, groups) array, "
     "got float"),
    (dict(mode="per_group", group_size=64, scale=S, scale_ub=2.0), ValueError, "scale_ub applies to mode='per_token'"),
    (dict(mode="per_group", group_size=64, scale=S, ue8m0=1), TypeError, "ue8m0 must be True or False, got 1"),
    (dict(mode="per_group", group_size=64, scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4"),
    (dict(mode="per_group", group_size=64, scale=O + 60), ValueError, "out and scale overlap"),
    (dict(mode="per_group", group_size=64, scale=S, scale_stride=0), ValueError, "scale_stride must be between 1"),
    (dict(mode="per_group", group_size=64, scale=S, scale_stride=True), TypeError, "scale_stride must be an int"),
    (dict(mode="per_group", group_size=64, scale=S, scale_stride=3, column_major_scales=True), ValueError,
     "scale_stride must be >= num_tokens (4) for column-major scales"),
    (dict(mode="per_group", group_size=64, scale=W - 4 * 4 + 4, column_major_scales=True, scale_stride=4),
     ValueError, "weight and scale overlap"),
    (dict(mode="per_group", group_size=64, hidden_size=128, scale=S, scale_stride=1), ValueError,
     "scale_stride must be >= the groups per row (2) for row-major scales"),
    (dict(out_dtype="bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(out=3.5), TypeError, "out must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
                               "__cuda_array_interface__ or __dlpack__, got float"),
    (dict(out=X + 100), ValueError, "out and input overlap; they must be disjoint"),
    (dict(out=W - 4 * 64 + 8), ValueError, "out and weight overlap"),
    (dict(input=X + 1), ValueError, "input pointer 0x200001 is not aligned to 2 bytes, as its bfloat16"),
    (dict(weight=W + 2, dtype="float32"), ValueError, "weight pointer 0x400002 is not aligned to 4 bytes"),
    (dict(epsilon=-1.0), ValueError, "epsilon must be finite and >= 0"),
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(out_stride=63), ValueError, "out_stride must be >= hidden_size (64)"),
    (dict(round_input=1), TypeError, "round_input must be True or False, got 1"),
    (dict(pdl="yes"), TypeError, "pdl must be True or False"),
    (dict(norm_out=N + 1), ValueError, "norm_out pointer 0x900001 is not aligned to 2 bytes, as its bfloat16"),
    (dict(norm_out=0), ValueError, "norm_out must be a non-null device pointer, got 0"),
    (dict(norm_out="n"), TypeError, "norm_out must be a device pointer (int), a pyrms.Tensor, a torch tensor"),
    (dict(norm_out=True), TypeError, "norm_out must be a device pointer (int), a pyrms.Tensor"),
    (dict(norm_out=O + 100), ValueError, "out and norm_out overlap; they must be disjoint"),
    (dict(norm_out=X + 64), ValueError, "input and norm_out overlap"),
    (dict(norm_out=W - 2), ValueError, "weight and norm_out overlap"),
    (dict(norm_out=S, mode="per_token", scale=S + 16), ValueError, "scale and norm_out overlap"),
    (dict(norm_out=S, scale=S + 4), ValueError, "scale and norm_out overlap"),  # a device scale
    (dict(norm_out=N, norm_out_stride=63), ValueError, "norm_out_stride must be >= hidden_size (64)"),
    (dict(norm_out_stride=64), ValueError, "norm_out_stride applies with a norm_out only, got norm_out_stride=64"),
    (dict(norm_out=FakeArray(N, (4, 64), "<f4"), dtype="bfloat16"), ValueError, "norm_out has dtype float32, but the dtype is"),
    (dict(norm_out=FakeArray(N, (4, 65)), dtype="float16"), ValueError, "norm_out has shape (4, 65), expected (4, 64)"),
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
    call(mode="per_group", group_size=64, scale=S)
    call(mode="per_group", group_size=64, scale=S, scale_stride=4, column_major_scales=True, ue8m0=True)
    call(mode="per_group", group_size=64, hidden_size=128, scale=S, scale_stride=2, out_dtype="int8", ue8m0=True)
    call(fused=True, mode="per_group", group_size=64, scale=O + 64 * 4)  # scales right after out
    call(norm_out=O + 64 * 4 + 2, norm_out_stride=65)  # norm_out right after out, at any 2-byte address
    call(fused=True, mode="per_token", scale=S, norm_out=FakeArray(N, (4, 64), "<f2"), dtype="float16")
    assert len(_launches(fake)) == 9
    assert struct.pack("<f", 1e-30) != b"\0\0\0\0"


# --- out, scale and scale_ub as arrays -------------------------------------------------------------------


def _t(ptr, shape, dtype="float32", strides=None, **options):
    """A torch-like tensor of torch.<dtype> (hostile_cases.TorchLikeTensor: made-up memory, no torch needed)."""
    return TorchLikeTensor(ptr, shape, dtype=f"torch.{dtype}", strides=strides, **options)


_KINDS = ("ptr",) * 5 + ("f32", "f32", "i32", "i64", "i64")  # static and per token (rms_norm_quant_kernel)
_FUSED_KINDS = ("ptr",) * 6 + ("f32", "f32", "i32", "i64", "i64", "i64")
_GROUP_KINDS = ("ptr",) * 4 + ("i64", "i64", "f32", "i32", "i32", "i32", "i64", "i64")

# (the kernel's parameter kinds, fused, a call with arrays, the same call on raw pointers): torch tensors and CAI
# objects, mixed with pointers; num_tokens, hidden_size, out_stride, out_dtype and scale_stride from the arrays.
ARRAY_CALLS = [
    (_KINDS, False, dict(out=_t(O + 3, (2, 2, 5120), "float8_e5m2"), input=_t(X, (2, 2, 5120), "bfloat16"),
                         num_tokens=None, hidden_size=None, scale=_t(S, ())),
     dict(out=O + 3, num_tokens=4, hidden_size=5120, out_dtype="float8_e5m2", scale=S)),
    (_KINDS, False, dict(out=FakeArray(O, (4, 5120), typestr="|i1", strides=(5123, 1)), num_tokens=None,
                         hidden_size=None),
     dict(out=O, num_tokens=4, hidden_size=5120, out_stride=5123, out_dtype="int8")),
    (_KINDS, False, dict(out=_t(O, (4, 64), "uint8"), out_dtype="float8_e4m3fn", scale=FakeArray(S, (1,), "<f4")),
     dict(out=O, out_dtype="float8_e4m3fn", scale=S)),
    (_KINDS, False, dict(out=_t(O, (4, 64), "float8_e4m3fn"), mode="per_token", scale=_t(S, (4, 1)),
                         scale_ub=_t(W + 4096, (1,))),
     dict(out=O, mode="per_token", scale=S, scale_ub=W + 4096)),
    (_KINDS, False, dict(mode="per_token", out_dtype="int8", scale=FakeArray(S, (4,), "<f4")),  # only the scales
     dict(mode="per_token", out_dtype="int8", scale=S)),
    (_FUSED_KINDS, True, dict(out=_t(O, (4, 64), "int8"), residual=_t(R, (4, 64), "bfloat16"), num_tokens=None,
                              hidden_size=None, mode="per_token", scale=_t(S, (4,))),
     dict(out=O, out_dtype="int8", mode="per_token", scale=S)),
    (_GROUP_KINDS, False, dict(out=_t(O, (4, 128), "int8", strides=(130, 1)), mode="per_group", group_size=64,
                               hidden_size=128, scale=_t(S, (4, 2), strides=(5, 1))),
     dict(out=O, out_stride=130, out_dtype="int8", mode="per_group", group_size=64, hidden_size=128, scale=S,
          scale_stride=5)),
    (_GROUP_KINDS, False, dict(mode="per_group", group_size=64, hidden_size=128, column_major_scales=True,
                               scale=_t(S, (4, 2), strides=(1, 8))),  # a (2, 8) buffer's .t()[:4]
     dict(mode="per_group", group_size=64, hidden_size=128, column_major_scales=True, scale=S, scale_stride=8)),
    (_GROUP_KINDS, False, dict(mode="per_group", group_size=64, hidden_size=128, column_major_scales=True,
                               scale=_t(S, (4, 2), strides=(1, 4))),  # S = num_tokens: scale_stride's default
     dict(mode="per_group", group_size=64, hidden_size=128, column_major_scales=True, scale=S)),
]


@pytest.mark.parametrize("kinds, fused, arrays, pointers", ARRAY_CALLS)
def test_arrays_launch_what_their_pointers_launch(qfake, kinds, fused, arrays, pointers):
    """out, scale and scale_ub given as arrays launch exactly the raw-pointer call on their pointers: the same
    kernel (out's dtype, when out_dtype is left out), grid, block and arguments (strides, scale_stride)."""
    qfake.param_kinds = kinds
    call(fused=fused, **arrays)
    call(fused=fused, **pointers)
    with_arrays, with_pointers = _launches(qfake)
    assert with_arrays == with_pointers


def test_out_dtype_defaults_to_out_arrays_else_float8_e4m3fn(qfake):
    qfake.param_kinds = _KINDS
    call()
    call(out_dtype="float8_e4m3fn")
    call(out=_t(O, (4, 64), "int8"))
    call(out_dtype=np.int8)
    default, e4m3, int8_array, int8 = (args[0] for args in _launches(qfake))  # the kernels launched
    assert default == e4m3 and int8_array == int8 and int8 != e4m3


def test_empty_out_arrays_launch_nothing(qfake):
    call(out=_t(O, (0, 64), "int8"), num_tokens=None, hidden_size=None, mode="per_token", scale=_t(S, (0,)))
    call(out=_t(O, (3, 0, 64), "int8"), input=_t(X, (3, 0, 64), "bfloat16"), num_tokens=None, hidden_size=None)
    assert not _launches(qfake)


_GROUPS = dict(mode="per_group", group_size=64, hidden_size=128)  # 2 groups per row

# Refused before the driver is asked anything: a valid torch tensor's device is checked as it is read, so the
# cases whose arrays are valid and whose call is not use CAI objects (no device to check with one GPU).
BAD_ARRAYS = [
    (dict(out=_t(O, (4, 64), "int8"), out_dtype="float8_e4m3fn"), "out has dtype int8, but out_dtype is float8_e4m3fn"),
    (dict(out=_t(O, (4, 64), "float8_e5m2"), out_dtype=np.int8), "out has dtype float8_e5m2, but out_dtype is int8"),
    (dict(out=_t(O, (4, 64), "int8"), out_dtype="bfloat16"), "quantized output dtype 'bfloat16' is not supported"),
    (dict(out=_t(O, (5, 64), "int8")), "out has shape (5, 64), expected (4, 64)"),
    (dict(out=_t(O, (4, 64), "int8", strides=(128, 2))), "out must be contiguous along the hidden dimension"),
    (dict(out=_t(O, (4, 64), "int8", strides=(100, 1)), out_stride=70), "out_stride=70 disagrees with out's row "
                                                                         "stride 100"),
    (dict(out=_t(O, (4, 64), "int8", strides=(32, 1))), "out has row stride 32 < hidden_size 64: its rows overlap"),
    (dict(out=_t(0, (4, 64), "int8")), "out has a null data pointer"),
    (dict(out=_t(O, (4, 64), "int8", requires_grad=True)), "pass out.detach()"),
    (dict(out=_t(O, (4, 64), "uint8")), "out has 1-byte storage (torch.uint8) that names no quantized dtype: pass "
                                        "out_dtype= (one of float8_e4m3fn, float8_e5m2, int8)"),
    (dict(out=FakeArray(O, (4, 64), typestr="<V1")), "out has 1-byte storage (typestr '<V1')"),
    (dict(out=_t(O, (4, 64), "bfloat16")), "out has dtype torch.bfloat16; allowed: torch.float8_e4m3fn, "
                                           "torch.float8_e5m2, torch.int8, or torch.uint8 storage with out_dtype"),
    (dict(out=Tensor(O, (4, 64), "bfloat16")), "out is a pyrms.Tensor of bfloat16; allowed: float8_e4m3fn"),
    (dict(out=FakeArray(O, (4, 64))), "out: array typestr '<f2' is not a quantized output type"),
    (dict(out=FakeArray(O, (4, 64), typestr="|i1"), mode="per_token", scale=FakeArray(O + 64, (4,), "<f4")),
     "out and scale overlap"),
    (dict(scale=FakeArray(S, (2,), "<f4")), "scale has shape (2,); expected one float32 element (shape () or (1,))"),
    (dict(scale=_t(S, (1,), "float16")), "scale has dtype float16; scales are float32"),
    (dict(scale=_t(0, (1,))), "scale has a null data pointer"),
    (dict(scale=_t(S, (1,), device=("cpu", None))), "scale is a torch tensor on cpu; pyrms needs CUDA memory"),
    (dict(scale=FakeArray(S + 2, (), "<f4")), "scale pointer 0x500002 is not aligned to 4 bytes"),
    (dict(mode="per_token", scale=_t(S, (4, 2))), "scale has shape (4, 2); per-token scales are (4,) or (4, 1) "
                                                  "float32"),
    (dict(mode="per_token", scale=_t(S, (4,), strides=(2,))), "per-token scales must be contiguous"),
    (dict(mode="per_token", scale=_t(S, (4,), requires_grad=True)), "pass scale.detach()"),
    (dict(mode="per_token", scale=_t(S, (4,)), scale_ub=_t(W + 4096, (2,))), "scale_ub has shape (2,); expected one"),
    (dict(mode="per_token", scale=S, scale_ub=FakeArray(W + 4096, (1,), "<f4"), out_dtype="int8"),
     "scale_ub applies to float8"),
    (dict(scale_ub=FakeArray(W + 4096, (1,), "<f4")), "scale_ub applies to mode='per_token' only"),
    (dict(_GROUPS, scale=_t(S, (4, 3))), "scale has shape (4, 3); per-group scales are (4, 2) float32 (num_tokens, "
                                        "groups) with strides (S, 1) with S >= 2"),
    (dict(_GROUPS, scale=_t(S, (4, 2), strides=(1, 4))), "scale has strides (1, 4) (elements); expected strides "
                                                         "(S, 1) with S >= 2; column-major scales (strides (1, S)) "
                                                         "need column_major_scales=True"),
    (dict(_GROUPS, scale=_t(S, (4, 2), strides=(0, 1))),
     "scale has strides (0, 1) (elements); expected strides (S, 1)"),
    (dict(_GROUPS, scale=_t(S, (4, 2), strides=(8, 1)), scale_stride=4), "scale_stride=4 disagrees with scale's row "
                                                                          "stride 8"),
    (dict(_GROUPS, column_major_scales=True, scale=_t(S, (2, 4))),
     "with strides (1, S) with S >= 4: a (2, S) row-major buffer seen through .t() (pass its .t())"),
    (dict(_GROUPS, column_major_scales=True, scale=_t(S, (4, 2))), "row-major scales need column_major_scales=False"),
    (dict(_GROUPS, column_major_scales=True, scale=_t(S, (4, 2), strides=(1, 3))),
     "scale has strides (1, 3) (elements); expected strides (1, S) with S >= 4"),
    (dict(_GROUPS, column_major_scales=True, scale=_t(S, (4, 2), strides=(1, 8)), scale_stride=6),
     "scale_stride=6 disagrees with scale's group stride 8"),
    (dict(_GROUPS, group_size=32, scale=_t(S, (4, 2))), "group_size must be one of (64, 128), got 32"),
    (dict(_GROUPS, hidden_size=96, scale=_t(S, (4, 2))), "per_group needs hidden_size a multiple of group_size 64"),
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("overrides, message", BAD_ARRAYS)
def test_bad_arrays_are_refused(overrides, message, fused):
    with pytest.raises(ValueError) as info:
        call(fused=fused, **overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("overrides, message", [
    (dict(_GROUPS, column_major_scales=1, scale=_t(S, (4, 2))), "column_major_scales must be True or False, got 1"),
    (dict(mode="per_token", scale=_t(S, (4,)), num_tokens=None), "num_tokens and hidden_size are required"),
    (dict(out=[O]), "out must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with"),
    (dict(scale=[0.5]), "scale must be a float, a device pointer (int) or a float32 array of one element, got list"),
])
def test_bad_array_kinds_are_refused(overrides, message):
    with pytest.raises(TypeError) as info:
        call(**overrides)
    assert message in str(info.value)

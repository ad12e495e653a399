"""pyrms.layer_norm_quant without a GPU: the twin against a float64 spelling of FlashInfer's layernorm_quant and
against layer_norm's twin, the plan (LayerNorm's row, a quantizing kernel of its own), the kernels compiled by NVRTC
for sm_90, the registry entry, the launches' packed arguments and every refusal before a launch (fake driver)."""
import importlib
import math

import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms import dtypes, precompile, ptx_inspect, reference
from pyrms.ops import registry
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm_quant import twin as quant_twin
from tests.support.hostile_cases import FakeArray
from tests.support.kernel_resources import assert_no_spills, compile_with_report

lnq_module = importlib.import_module("pyrms.ops.layer_norm.quant")

F32 = np.float32
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]
O, X, W, B, S = 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20  # made-up, 16-byte aligned device addresses


def _rows(rng, dtype, rows, hidden, low=-3.0, high=3.0):
    return rng.uniform(low, high, (rows, hidden)).astype(dtypes.get(dtype).numpy)


def flashinfer_layernorm_quant(x, gamma, beta, scale, eps, out_dtype, *, round_input):
    """FlashInfer's layernorm_quant (include/flashinfer/norm.cuh, generalLayerNorm with a per-tensor scale) spelled
    in float64: v = (x - mean) * rsqrt(var + eps) * gamma + beta, cast to the input's dtype (round_input: its
    `T val = cuda_cast<T>(...)`), times 1/scale, cast to fp8 (satfinite, round to nearest even)."""
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(axis=1, keepdims=True)
    v = centered / np.sqrt(np.mean(centered * centered, axis=1, keepdims=True) + eps) * gamma + beta
    if round_input:
        v = v.astype(x.dtype).astype(np.float64)
    qmax = float(ml_dtypes.finfo(out_dtype).max)
    return np.clip(v * (1.0 / scale), -qmax, qmax).astype(out_dtype)


def _fp8_steps_apart(a, b) -> np.ndarray:
    """How many representable values lie between fp8 values a and b, by their ordered codes."""
    def ordered(v):
        code = v.view(np.uint8).astype(np.int64)
        return np.where(code & 0x80, -(code & 0x7F), code)
    return np.abs(ordered(a) - ordered(b))


# --- the twin ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("round_input", [False, True])
@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_twin_is_flashinfers_formula(out_dtype, round_input):
    """bf16 rows, fp32 gamma and beta (FlashInfer's only combination): every output within one fp8 step of the
    float64 spelling (the fp32 roundings of the statistics and products), nearly all the same code; the scale
    makes the largest outputs saturate. round_input=True is nearer FlashInfer's kernel than the fp32 value."""
    rng = np.random.default_rng(3)
    x = _rows(rng, "bfloat16", 8, 5120)
    gamma, beta = rng.uniform(-2, 2, 5120).astype(F32), rng.uniform(-1, 1, 5120).astype(F32)
    qt = dtypes.quantized(out_dtype)
    scale = float(F32(4.0 / float(qt.qmax)))
    expected = flashinfer_layernorm_quant(x, gamma, beta, scale, 1e-6, qt.numpy, round_input=round_input)
    q = ln_twin.layer_norm_quant_twin(x, gamma, beta, 1e-6, scale, qt, block=160, round_input=round_input)
    apart = _fp8_steps_apart(q, expected)
    assert apart.max() <= 1 and np.mean(apart == 0) > 0.999
    assert np.any(np.abs(expected.astype(F32)) == float(qt.qmax))  # saturation reached
    other = ln_twin.layer_norm_quant_twin(x, gamma, beta, 1e-6, scale, qt, block=160, round_input=not round_input)
    assert np.sum(_fp8_steps_apart(other, expected) > 0) > np.sum(apart > 0)
    # the float64 reference, saturated and cast, is the same formula
    ref = ln_twin.layer_norm_quant_ref(x, gamma, beta, 1e-6, scale)
    direct = np.clip(ref, -float(qt.qmax), float(qt.qmax)).astype(qt.numpy)
    assert _fp8_steps_apart(direct, q).max() <= 1 + int(round_input)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype, params", [("bfloat16", "float32"), ("float16", "same"), ("float32", "same")])
def test_twin_quantizes_layer_norms_values(dtype, params, out_dtype):
    """The fp32 values are layer_norm's (its fp32 output beside 2-byte rows; round_input: its output of the dtype),
    quantized by rms_norm_quant's static step: the statistics and the tree are the forward's, the phases too."""
    rng = np.random.default_rng(5)
    x = _rows(rng, dtype, 5, 769)
    pdt = np.float32 if params == "float32" else x.dtype
    w, b = rng.uniform(-1, 1, 769).astype(pdt), rng.uniform(-1, 1, 769).astype(pdt)
    for weight, bias in ((w, b), (None, b), (w, None), (None, None)):
        fp32 = ln_twin._values(x, weight, bias, 1e-5, 64, 3, False)
        rounded = ln_twin.layer_norm_twin(x, weight, bias, 1e-5, block=64, row_phases=3).astype(F32)
        for round_input, values in ((False, fp32), (True, rounded)):
            q = ln_twin.layer_norm_quant_twin(x, weight, bias, 1e-5, 0.02, out_dtype, block=64, row_phases=3,
                                              round_input=round_input)
            want = quant_twin.quantize_static(values, 0.02, out_dtype)
            assert q.dtype == want.dtype and np.array_equal(q.view(np.uint8), want.view(np.uint8))
        if dtype != "float32":
            assert np.array_equal(fp32, ln_twin.layer_norm_twin(x, weight, bias, 1e-5, block=64, row_phases=3,
                                                                out_dtype="float32"))


def test_twin_keeps_nan_and_refuses_a_bad_scale():
    x = np.ones((2, 16), F32)
    x[0, 3] = np.nan
    q = ln_twin.layer_norm_quant_twin(x, None, None, 1e-5, 1.0, "float8_e4m3fn", block=32)
    assert np.all(q.view(np.uint8)[0] == 0x7F)  # a NaN row: every value NaN, the one positive pattern
    assert np.all(q.view(np.uint8)[1] == 0)  # a constant row: 0
    with pytest.raises(ValueError, match="scale must be a finite float32 > 0"):
        ln_twin.layer_norm_quant_twin(x, None, None, 1e-5, 0.0, "int8", block=32)


# --- the plan and the kernels --------------------------------------------------------------------------------------


def test_plan_is_layer_norms_row_with_a_quantizing_kernel():
    p = ln_plan.plan_layer_norm_quant("bf16", 5120, "float8_e4m3fn", weight_dtype="float32", round_input=True)
    ln = ln_plan.plan_layer_norm("bf16", 5120, weight_dtype="float32")
    assert (p.block, p.cache, p.spread) == (ln.block, ln.cache, ln.spread)  # the forward's tree, bit for bit
    assert p.expression == \
        "pyrms::layer_norm_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 4, 1, true, true, false, false, float>"
    assert p.signature == ("ptr", "ptr", "ptr", "ptr", "ptr", "f32", "f32", "i32", "i64", "i64")
    assert (p.weight, p.param_dtype, p.FLAGS) == ("float32", dtypes.FLOAT32, ("bias", "round_input"))
    q = ln_plan.plan_layer_norm_quant("float32", 9, "int8", weight=False, bias=False)
    assert q.expression == "pyrms::layer_norm_quant_kernel<float, signed char, 1, 1, false, false, false, false, void>"
    assert set(p.group).isdisjoint(ln.group) and len(p.group) == 14
    assert {ln_plan.plan_layer_norm_quant("fp16", h, "float8_e5m2").group for h in (1, 769, 65537)} == \
        {ln_plan.plan_layer_norm_quant("fp16", 8, "float8_e5m2").group}  # one unit whatever the hidden size


@pytest.mark.parametrize("kwargs, message", [
    (dict(out_dtype="bfloat16"), "quantized output dtype 'bfloat16' is not supported"),
    (dict(out_dtype="int8", weight_dtype="float16"), "weight dtype must be bfloat16 (the input's) or float32, got float16"),
])
def test_plan_refuses(kwargs, message):
    with pytest.raises(ValueError) as info:
        ln_plan.plan_layer_norm_quant("bf16", 64, **kwargs)
    assert message in str(info.value)


def test_kernels_compile_without_spills():
    """One unit (bf16 rows, fp32 gamma and beta, e4m3, with bias, quantizing the rounded value: FlashInfer's): every
    CACHE and shape variant without spills or stack, the saturating conversion, correctly rounded divisions, and
    griddepcontrol.wait before any global access."""
    p = ln_plan.plan_layer_norm_quant("bf16", 5120, "float8_e4m3fn", weight_dtype="float32", round_input=True)
    program = compile_with_report(p.source, p.group)
    assert_no_spills(program, p.group)
    ptx = program.ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rn.bf16.f32" in ptx  # round_input: the bf16 rounding
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx and "fma.rn.f32" not in ptx
    kernels = [f for f in ptx_inspect.parse_functions(ptx) if f.kind == "entry"]
    assert len(kernels) == len(p.group) and all(fn.waits_before_memory() for fn in kernels)


def test_registry_entry_and_units():
    spec = registry.get("layer_norm_quant")
    assert spec.module == "pyrms.ops.layer_norm.quant" and spec.source == "layer_norm.cu" and spec.check == "quant"
    assert spec.flags == ("bias", "round_input") and spec.twin == "pyrms.ops.layer_norm.twin"
    assert spec.operands() == (("input", "out"), ("weight", "bias", "scale"))
    assert spec.operands(bias=False, weight=False) == (("input", "out"), ("scale",))
    assert pyrms.layer_norm_quant is lnq_module.layer_norm_quant and "layer_norm_quant" in pyrms.__all__
    assert reference.layer_norm_quant_twin is ln_twin.layer_norm_quant_twin
    units = precompile.every_unit(["layer_norm_quant"], [dtypes.BFLOAT16])
    assert len(units) == 3 * 3 * 4  # output dtypes x weight kinds x (bias, round_input)
    u = precompile.unit("layer_norm_quant", "bf16", 769, out_dtype="int8", weight_dtype="float32", bias=True,
                        round_input=True)
    assert u in units and u.names == ln_plan.plan_layer_norm_quant("bf16", 769, "int8", weight_dtype="float32",
                                                                  round_input=True).group
    with pytest.raises(TypeError, match="layer_norm_quant has no option 'gemma'"):
        precompile.unit("layer_norm_quant", "bf16", 8, gemma=True)


# --- the launches, on the fake driver ------------------------------------------------------------------------------


@pytest.fixture
def qfake(fake, names_only):
    fake.param_kinds = ("ptr", "ptr", "ptr", "ptr", "ptr", "f32", "f32", "i32", "i64", "i64")
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def _kernels(fake):
    return [fake.kernel_names[args[0]] for args in _launches(fake)]


def test_launch_arguments(qfake):
    pyrms.layer_norm_quant(O + 3, X + 2, W, B, 1e-6, 4, 5120, scale=0.5, out_stride=5123)
    pyrms.layer_norm_quant(O, X, None, B, 1e-5, 300, 1024, scale=S, out_dtype="int8", dtype="float32",
                           input_stride=1031)
    pyrms.layer_norm_quant(O, X, W, None, 1e-5, 1, 64, scale=np.float32(0.25), dtype="float16", pdl=False,
                           round_input=True)
    pyrms.layer_norm_quant(O, X, W, B, 1e-5, 2, 64, scale=0.25, weight_dtype="float32", out_dtype="float8_e5m2")
    first, second, third, fourth = _launches(qfake)
    assert first[6] == (O + 3, X + 2, W, B, 0, 0.5, pytest.approx(1e-6), 5120, 5120, 5123)
    assert second[6] == (O, X, 0, B, S, 1.0, pytest.approx(1e-5), 1024, 1031, 1024)
    assert third[6] == (O, X, W, 0, 0, 0.25, pytest.approx(1e-5), 64, 64, 64)
    assert fourth[6][:4] == (O, X, W, B)
    assert _kernels(qfake) == [
        ln_plan.plan_layer_norm_quant("bf16", 5120).latency_expression,
        ln_plan.plan_layer_norm_quant("float32", 1024, "int8", weight=False).expression,  # 300 rows: many
        ln_plan.plan_layer_norm_quant("fp16", 64, bias=False, round_input=True).aligned_latency_expression,
        ln_plan.plan_layer_norm_quant("bf16", 64, "float8_e5m2", weight_dtype="float32").aligned_latency_expression]
    assert [name for name, *_ in qfake.calls if name.startswith("cuLaunch")] == \
        ["cuLaunchKernelEx", "cuLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernelEx"]


def test_arrays_launch_what_their_pointers_launch(qfake):
    pyrms.layer_norm_quant(FakeArray(O, (2, 3, 64), "|i1"), FakeArray(X, (6, 64), "<f2", strides=(256, 2)),
                           FakeArray(W, (64,), "<f4"), FakeArray(B, (64,), "<f4"), 1e-5, scale=FakeArray(S, (1,), "<f4"))
    pyrms.layer_norm_quant(O, X, W, B, 1e-5, 6, 64, scale=S, out_dtype="int8", dtype="float16", input_stride=128,
                           weight_dtype="float32")
    arrays, pointers = _launches(qfake)
    assert arrays[6] == pointers[6] == (O, X, W, B, S, 1.0, pytest.approx(1e-5), 64, 128, 64)
    assert _kernels(qfake)[0] == _kernels(qfake)[1]


def call(**overrides):
    args = dict(out=O, input=X, weight=W, bias=B, epsilon=1e-5, num_tokens=4, hidden_size=64, scale=0.5)
    args.update(overrides)
    head = [args.pop(k) for k in ("out", "input", "weight", "bias", "epsilon", "num_tokens", "hidden_size")]
    return pyrms.layer_norm_quant(*head, **args)


def test_valid_edges_reach_the_driver(qfake):
    """What the refusals below change, undone, launches."""
    call(scale=1e-30)
    call(scale=3.0e38)
    call(out=X + 2 * 64 * 4)  # out right after the input
    call(out=O + 1, out_stride=67)  # any byte address, any stride
    call(scale=W + 16)  # the device scale may share the weight's memory (both are read)
    call(input=X + 2, input_stride=65, weight=W + 2, bias=B + 6)
    call(weight=None, bias=None)
    assert len(_launches(qfake)) == 7


BAD = [
    (dict(scale=0.0), ValueError, "scale must be finite and > 0 in float32 (between 2^-149 and 3.402823e+38), got 0.0"),
    (dict(scale=-1.0), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.nan), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.inf), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=None), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                  "got NoneType None"),
    (dict(scale=True), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element"),
    (dict(scale=0), ValueError, "scale must be a non-null device pointer, got 0"),
    (dict(scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4 bytes, as its float32 elements must be"),
    (dict(scale=O + 60), ValueError, "out and scale overlap; they must be disjoint"),
    (dict(scale=FakeArray(S, (2,), "<f4")), ValueError, "scale has shape (2,); expected one float32 element"),
    (dict(out_dtype="bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported; allowed: "
                                             "float8_e4m3fn, float8_e5m2, int8"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(out=X + 100), ValueError, "out and input overlap; they must be disjoint"),
    (dict(out=X), ValueError, "out and input overlap; they must be disjoint"),  # never in place: another dtype
    (dict(out=W + 8), ValueError, "out and weight overlap; they must be disjoint"),
    (dict(out=B), ValueError, "out and bias overlap; they must be disjoint"),
    (dict(input=X + 1), ValueError, "input pointer 0x200001 is not aligned to 2 bytes, as its bfloat16 elements must be"),
    (dict(weight=W + 2, weight_dtype="float32"), ValueError, "weight pointer 0x300002 is not aligned to 4 bytes"),
    (dict(weight=None, weight_dtype="float32"), ValueError, "weight_dtype"),
    (dict(weight_dtype="float16"), ValueError, "weight dtype must be bfloat16 (the input's) or float32, got float16"),
    (dict(epsilon=-1.0), ValueError, "epsilon"),
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(out_stride=63), ValueError, "out_stride must be >= hidden_size (64) so rows do not overlap, got 63"),
    (dict(input_stride=8), ValueError, "input_stride must be >= hidden_size (64)"),
    (dict(round_input=1), TypeError, "round_input must be True or False, got 1"),
    (dict(pdl="yes"), TypeError, "pdl must be True or False, got 'yes'"),
    (dict(out=FakeArray(O, (4, 64), "|i1"), out_dtype="float8_e5m2"), ValueError,
     "out has dtype int8, but out_dtype is float8_e5m2"),
    (dict(input=FakeArray(X, (4, 64), "<f2"), weight=FakeArray(W, (64,), "<f4"), bias=FakeArray(B, (64,), "<f2"),
          num_tokens=None, hidden_size=None), ValueError, "bias has dtype float16, but the weight's and bias's dtype is "
                                                          "float32"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_are_refused(qfake, overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)
    assert not _launches(qfake)

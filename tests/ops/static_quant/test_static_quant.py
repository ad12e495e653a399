"""pyrms.static_quant without a GPU: the twin against a float64 spelling of vLLM's static_scaled_fp8_quant and
static_scaled_int8_quant (saturation, the NaN rule, int8's rounding), the plan, the kernels compiled by NVRTC
for sm_90 (16-byte loads, the saturating conversions, correctly rounded divisions), the launches' packed
arguments and every refusal before a launch (through the fake driver), and the precompile units."""
import importlib
import math

import ml_dtypes  # noqa: F401  (the float8 numpy dtypes)
import numpy as np
import pytest

import pyrms
from tests.support.hostile_cases import FakeArray
from pyrms import compiler, dtypes, precompile, ptx_inspect
from pyrms.ops import registry
from pyrms.ops.rms_norm_quant import twin as quant_twin
from pyrms.ops.static_quant import plan as sq_plan
from pyrms.ops.static_quant import twin as sq_twin

sq_module = importlib.import_module("pyrms.ops.static_quant.op")

F32 = np.float32
DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]
# (mantissa bits, smallest normal exponent) of each float8 type, for a rounding that does not use ml_dtypes.
FP8_FORMAT = {"float8_e4m3fn": (3, -6), "float8_e5m2": (2, -14)}
O, X, S = 1 << 20, 2 << 20, 5 << 20  # made-up, 16-byte aligned device addresses


# --- the twin against vLLM's formula in float64 ------------------------------------------------------------


def f32(x):
    """A float64 result rounded to float32: one correctly rounded fp32 +, *, / of fp32 operands (53 >= 2*24 + 2
    bits, so the double rounding is innocuous)."""
    return np.asarray(x, dtype=np.float64).astype(F32).astype(np.float64)


def round_fp8(v, name):
    """float64 values rounded to the float8 grid, nearest even (step 2**(e - mantissa)), in float64."""
    mantissa, emin = FP8_FORMAT[name]
    with np.errstate(divide="ignore"):
        e = np.maximum(np.floor(np.log2(np.abs(v))), emin)
    step = np.exp2(e - mantissa)
    return np.rint(v / step) * step


def vllm_bytes(x, scale, out_dtype):
    """The bytes vLLM's kernels write, spelled in float64 (each fp32 operation rounded to fp32):
    static_scaled_fp8_quant: inv = 1.0f / scale; out = fp8(clamp(x * inv, -qmax, qmax)), NaN kept (written as
    the positive NaN); static_scaled_int8_quant: out = int8(clamp(rint(x / scale), -128, 127)), NaN -> 0."""
    qt = dtypes.quantized(out_dtype)
    x64, s64 = np.asarray(x).astype(np.float64), float(F32(scale))
    with np.errstate(divide="ignore", invalid="ignore"):
        if qt.integer:
            z = np.clip(np.rint(f32(x64 / s64)), -128, 127)
            return np.where(np.isnan(z), 0, z).astype(np.int8).view(np.uint8)
        z = round_fp8(np.clip(f32(x64 * f32(1.0 / s64)), -float(qt.qmax), float(qt.qmax)), qt.name)
    return np.where(np.isnan(z), np.nan, z).astype(qt.numpy).view(np.uint8)  # exact: z is on the grid


def values(rng, dtype, shape, spread=12.0):
    """Rows over many binades (beyond qmax and below the smallest subnormal once scaled), in dtype."""
    v = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape))
    return v.astype(dtypes.get(dtype).numpy)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.0123, 3.7e-3, 250.0, 2.0 ** -20])
def test_twin_is_vllms_formula(rng, dtype, out_dtype, scale):
    x = values(rng, dtype, (7, 301))
    q = sq_twin.static_quant_twin(x, scale, out_dtype)
    assert q.dtype == dtypes.quantized(out_dtype).numpy and q.shape == (7, 301)
    np.testing.assert_array_equal(q.view(np.uint8), vllm_bytes(x, scale, out_dtype))


@pytest.mark.parametrize("out_dtype", QUANT)
def test_twin_is_rms_norm_quants_static_step_on_the_input(rng, out_dtype):
    x = values(rng, "bfloat16", (3, 64))
    np.testing.assert_array_equal(sq_twin.static_quant_twin(x, 0.5, out_dtype).view(np.uint8),
                                  quant_twin.quantize_static(x.astype(F32), 0.5, out_dtype).view(np.uint8))
    one = sq_twin.static_quant_twin(x[0], 0.5, out_dtype)  # one row, as a vector
    assert one.shape == (1, 64) and np.array_equal(one.view(np.uint8), sq_twin.static_quant_twin(x, 0.5, out_dtype)[:1].view(np.uint8))


@pytest.mark.parametrize("out_dtype, values_, want", [
    ("float8_e4m3fn", [448.0, 464.0, 480.0, 1e30, np.inf, -479.0, -np.inf], [448, 448, 448, 448, 448, -448, -448]),
    ("float8_e5m2", [57344.0, 61439.0, 61440.0, 1e38, np.inf, -np.inf], [57344, 57344, 57344, 57344, 57344, -57344]),
    ("int8", [126.5, 127.4, 127.5, 128.0, 1e30, np.inf, -128.4, -128.6, -np.inf], [126, 127, 127, 127, 127, 127, -128, -128, -128]),
])
def test_saturation(out_dtype, values_, want):
    """Past qmax (and ±inf) saturates, in float8 too (satfinite, not ml_dtypes' NaN for e4m3fn >= 480)."""
    q = sq_twin.static_quant_twin(np.array(values_, F32), 1.0, out_dtype)
    np.testing.assert_array_equal(q[0].astype(np.float64), np.array(want, np.float64))


@pytest.mark.parametrize("out_dtype, nan_byte", [("float8_e4m3fn", 0x7F), ("float8_e5m2", 0x7E), ("int8", 0x00)])
def test_nan_rule(out_dtype, nan_byte):
    """NaN of either sign: the one positive NaN pattern in float8, 0 in int8; no other value gives that byte."""
    x = np.array([np.nan, -np.nan, 1.0, -0.0], F32)
    q = sq_twin.static_quant_twin(x, 1.0, out_dtype).view(np.uint8)[0]
    assert list(q[:2]) == [nan_byte, nan_byte]
    assert q[2] != nan_byte and q[3] == (0x80 if out_dtype != "int8" else 0)  # -0 keeps its sign in float8


def test_int8_rounds_half_to_even_after_an_fp32_division():
    x = np.array([2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.4999999], F32)
    q = sq_twin.static_quant_twin(x, 1.0, "int8")[0]
    assert list(q) == [2, 4, -2, -4, 0, 0, 1]
    # the quotient is rounded to fp32 before rint: 0.75 / 0.3 = 2.5000001 in fp32 rounds up to 3
    assert sq_twin.static_quant_twin(np.array([0.75], F32), 0.3, "int8")[0, 0] == np.rint(F32(0.75) / F32(0.3))


def test_float8_multiplies_by_the_fp32_reciprocal():
    """vLLM's float8 step is x * (1/s), which differs from x / s for some x: the twin takes the product."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-400, 400, 20000).astype(F32)
    s = F32(0.3)
    prod, quot = x * (F32(1) / s), x / s
    assert np.any(prod != quot)  # the two spellings differ somewhere in fp32
    q = sq_twin.static_quant_twin(x, float(s), "float8_e4m3fn")
    np.testing.assert_array_equal(q.view(np.uint8), np.clip(prod, -448, 448).astype(ml_dtypes.float8_e4m3fn)
                                  .reshape(1, -1).view(np.uint8))


@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan, math.inf, 1e-46])
def test_twin_refuses_a_scale_the_kernel_cannot_take(scale):
    with pytest.raises(ValueError, match="scale must be a finite float32 > 0"):
        sq_twin.static_quant_twin(np.ones(4, F32), scale, "int8")


def test_twin_refuses_another_input_dtype():
    with pytest.raises(ValueError):
        sq_twin.static_quant_twin(np.ones(4, np.float64), 1.0, "int8")


# --- the plan and the kernels --------------------------------------------------------------------------------


def test_plan_names_its_kernel_and_block():
    p = sq_plan.plan_static_quant("bf16", 4096, "float8_e4m3fn")
    assert p.expression == "pyrms::static_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3>" and p.group == (p.expression,)
    assert p.signature == ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
    assert p.block == 512 and p.FLAGS == ()
    assert sq_plan.plan_static_quant("float32", 7, "int8").expression == "pyrms::static_quant_kernel<float, signed char>"
    # threads: one per output vector of 16 / itemsize elements, whole warps, at most MAX_BLOCK
    assert [sq_plan.plan_static_quant("bf16", h, "int8").block for h in (1, 8, 9, 2048, 2049, 4096, 65537)] == \
        [32, 32, 32, 256, 288, 512, 512]
    assert sq_plan.plan_static_quant("float32", 4096, "float8_e5m2").block == 512
    assert sq_plan.plan_static_quant("fp16", 769, "float8_e5m2").block == 128
    # the plan does not depend on anything but (dtype, hidden, out dtype): the same unit for every hidden size
    assert {sq_plan.plan_static_quant("fp16", h, "int8").group for h in (1, 769, 65537)} == \
        {("pyrms::static_quant_kernel<__half, signed char>",)}


@pytest.mark.parametrize("args, exc, message", [
    (("bf16", 8, "bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported"),
    (("int8", 8, "int8"), ValueError, "int8"),
    (("bf16", 0, "int8"), ValueError, "hidden must be a positive int, got 0"),
    (("bf16", True, "int8"), ValueError, "hidden must be a positive int, got True"),
])
def test_plan_refuses(args, exc, message):
    with pytest.raises(exc, match=message):
        sq_plan.plan_static_quant(*args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_compile_for_sm_90_with_16_byte_loads(dtype):
    """One NVRTC run per dtype, every output dtype: the body loads 16 bytes of input where input and out share
    their phase (ld.global.cs.v4), stores an output vector in one instruction (8 bytes beside 2-byte rows, 4
    beside fp32), converts with the saturating cvt, and divides correctly rounded, without flush to zero;
    griddepcontrol.wait comes before any global access."""
    plans = [sq_plan.plan_static_quant(dtype, 4096, q) for q in QUANT]
    names = tuple(n for p in plans for n in p.group)
    ptx = compiler.compile_source(plans[0].source, arch="sm_90", name_expressions=names, use_cache=False,
                                  want_ptx=True).ptx
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    kernels = [f for f in ptx_inspect.parse_functions(ptx) if f.kind == "entry"]
    assert len(kernels) == 3
    store = 4 if dtype == "float32" else 8
    for fn in kernels:
        assert fn.widths(True)[16] >= 1, (fn.name, fn.widths(True))
        assert "ld.global.cs.v4.u32" in {op.opcode for op in fn.ops}
        assert fn.widths(False)[store] >= 1 and fn.widths(False)[1] >= 1, (fn.name, fn.widths(False))
        assert fn.waits_before_memory()
    body = ptx.splitlines()
    for plan_, cvt in zip(plans, ("cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rni.sat.s8.f32")):
        assert cvt in ptx, plan_.expression
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx and "div.full" not in ptx
    assert body


def test_precompile_lists_its_units():
    units = precompile.every_unit(["static_quant"])
    assert [str(u) for u in units] == [f"static_quant.cu {d} {q}" for d in ("bfloat16", "float16", "float32")
                                       for q in QUANT]
    assert all(u.source == "static_quant.cu" and len(u.names) == 1 for u in units)
    for hidden in (1, 7, 8, 9, 769, 4096, 5125, 65537):
        for dt in dtypes.ALL:
            for q in QUANT:
                u = precompile.unit("static_quant", dt, hidden, out_dtype=q)
                assert u in units and u.names == sq_plan.plan_static_quant(dt, hidden, q).group
    assert precompile.unit("static_quant", "bf16", 8) == precompile.unit("static_quant", "bf16", 8,
                                                                         out_dtype="float8_e4m3fn")
    with pytest.raises(ValueError, match="static_quant has no weight_dtype"):
        precompile.unit("static_quant", "bf16", 8, weight_dtype="float32")
    with pytest.raises(TypeError, match="static_quant has no option 'gemma'"):
        precompile.unit("static_quant", "bf16", 8, gemma=True)


def test_registry_entry():
    spec = registry.get("static_quant")
    assert spec.module == "pyrms.ops.static_quant.op" and spec.source == "static_quant.cu" and spec.torch is None
    assert spec.bench is None and spec.flags == () and spec.operands() == (("input", "out"), ("scale",))
    assert registry.NAMES.index("static_quant") < registry.NAMES.index("seed_rms_norm")  # the seed stays last
    assert pyrms.static_quant is sq_module.static_quant and "static_quant" in pyrms.__all__
    assert spec.inspect.planner(dtypes.FLOAT16, 7).expression == "pyrms::static_quant_kernel<__half, __nv_fp8_e4m3>"


# --- the launches, on the fake driver ------------------------------------------------------------------------


@pytest.fixture
def qfake(fake):
    fake.param_kinds = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def test_launch_arguments(qfake):
    pyrms.static_quant(O + 3, X + 2, 4, 5120, scale=0.5, out_stride=5123)
    pyrms.static_quant(O, X, 300, 1024, scale=S, out_dtype="int8", dtype="float32", input_stride=1031)  # device scale
    pyrms.static_quant(O, X, 1, 1, scale=np.float32(0.25), dtype="float16", pdl=False)
    first, second, third = _launches(qfake)
    assert first[1:3] == ((4, 1, 1), (512, 1, 1)) and first[6] == (O + 3, X + 2, 0, 0.5, 5120, 5120, 5123)
    assert second[1:3] == ((300, 1, 1), (256, 1, 1)) and second[6] == (O, X, S, 1.0, 1024, 1031, 1024)
    assert third[0:1] and third[1:3] == ((1, 1, 1), (32, 1, 1)) and third[6] == (O, X, 0, 0.25, 1, 1, 1)
    assert [name for name, *_ in qfake.calls if name.startswith("cuLaunch")] == \
        ["cuLaunchKernelEx", "cuLaunchKernelEx", "cuLaunchKernel"]  # pdl on sm_90 unless refused


def test_arrays_launch_what_their_pointers_launch(qfake):
    pyrms.static_quant(FakeArray(O, (2, 3, 64), "|i1"), FakeArray(X, (6, 64), "<f2", strides=(256, 2)),
                       scale=FakeArray(S, (1,), "<f4"))
    pyrms.static_quant(O, X, 6, 64, scale=S, out_dtype="int8", dtype="float16", input_stride=128)
    arrays, pointers = _launches(qfake)
    assert arrays[1:3] == pointers[1:3] and arrays[6] == pointers[6] == (O, X, S, 1.0, 64, 128, 64)


def test_valid_edges_reach_the_driver(qfake):
    """What the refusals below change, undone, launches."""
    call(scale=1e-30)
    call(scale=3.0e38)
    call(out=X + 4 * 64 * 2, input=X)  # out right after the input
    call(out=O + 1, out_stride=67)  # any byte address, any stride
    call(scale=X + 16)  # the device scale may share the input's memory (both are read)
    call(input=X + 2, input_stride=65)
    assert len(_launches(qfake)) == 6


def call(**overrides):
    args = dict(out=O, input=X, num_tokens=4, hidden_size=64, scale=0.5)
    args.update(overrides)
    head = [args.pop(k) for k in ("out", "input", "num_tokens", "hidden_size")]
    return pyrms.static_quant(*head, **args)


BAD = [
    (dict(scale=0.0), ValueError, "scale must be finite and > 0 in float32 (between 2^-149 and 3.402823e+38), got 0.0"),
    (dict(scale=-1.0), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.nan), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=math.inf), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=1e-46), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=1e39), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale=None), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                  "got NoneType None"),
    (dict(scale="1"), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                 "got str '1'"),
    (dict(scale=True), TypeError, "scale must be a float, a device pointer (int) or a float32 array of one element, "
                                  "got bool True"),
    (dict(scale=0), ValueError, "scale must be a non-null device pointer, got 0"),
    (dict(scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4 bytes, as its float32 elements must be"),
    (dict(scale=O + 60), ValueError, "out and scale overlap; they must be disjoint"),
    (dict(scale=FakeArray(S, (2,), "<f4")), ValueError, "scale has shape (2,); expected one float32 element"),
    (dict(scale=FakeArray(S, (1,), "<f2")), ValueError, "scale has dtype float16; scales are float32"),
    (dict(out_dtype="bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported; allowed: "
                                             "float8_e4m3fn, float8_e5m2, int8"),
    (dict(dtype="int8"), ValueError, "int8"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(out=3.5), TypeError, "out must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
                               "__cuda_array_interface__ or __dlpack__, got float"),
    (dict(input=None), TypeError, "input must be a device pointer (int)"),
    (dict(out=X + 100), ValueError, "out and input overlap; they must be disjoint"),
    (dict(out=X - 1), ValueError, "out and input overlap; they must be disjoint"),
    (dict(input=0), ValueError, "input must be a non-null device pointer, got 0"),
    (dict(input=X + 1), ValueError, "input pointer 0x200001 is not aligned to 2 bytes, as its bfloat16 elements must be"),
    (dict(input=X + 2, dtype="float32"), ValueError, "input pointer 0x200002 is not aligned to 4 bytes, as its float32"),
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(num_tokens=None), TypeError, "num_tokens and hidden_size are required when every operand is a raw pointer"),
    (dict(hidden_size=2.0), TypeError, "hidden_size must be an int, got float 2.0"),
    (dict(out_stride=63), ValueError, "out_stride must be >= hidden_size (64) so rows do not overlap, got 63"),
    (dict(input_stride=8), ValueError, "input_stride must be >= hidden_size (64)"),
    (dict(pdl="yes"), TypeError, "pdl must be True or False, got 'yes'"),
    (dict(out=FakeArray(O, (4, 64), "<f2")), ValueError, "out"),
    (dict(out=FakeArray(O, (4, 64), "|i1"), out_dtype="float8_e5m2"), ValueError,
     "out has dtype int8, but out_dtype is float8_e5m2"),
    (dict(out=FakeArray(O, (4, 65), "|i1")), ValueError, "out has shape (4, 65), expected (4, 64)"),
    (dict(input=FakeArray(X, (4, 64), "<f4"), dtype="bfloat16"), ValueError, "input has dtype float32, but the dtype is bfloat16"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_are_refused(fake, overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)
    assert not _launches(fake)

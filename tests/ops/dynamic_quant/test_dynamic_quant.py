"""pyrms.dynamic_quant without a GPU: the twin against dynamic_quant_ref (vLLM's scaled_fp8_quant,
scaled_int8_quant and per_token_group_quant_fp8 spelled in float64) and each mode's own choices (the scale's
floor, scale_ub, int8's 127/amax, UE8M0, NaN and inf), the plan, the kernels compiled by NVRTC for sm_90, the
launches' packed arguments (per tensor: the clear, the maxima, the rows) and every refusal before a launch
(through the fake driver), and the precompile units."""
import importlib
import math

import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms import compiler, dtypes, precompile, ptx_inspect
from pyrms.ops import registry
from pyrms.ops.dynamic_quant import plan as dq_plan
from pyrms.ops.dynamic_quant import twin as dq_twin
from tests.support.hostile_cases import FakeArray

dq_module = importlib.import_module("pyrms.ops.dynamic_quant.op")

F32 = np.float32
DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]
MODES = dq_plan.DYNAMIC_MODES
O, X, S, U = 1 << 20, 2 << 20, 5 << 20, 6 << 20  # made-up, 16-byte aligned device addresses


def values(rng, dtype, shape, spread=6.0):
    """Rows over many binades, each row at its own magnitude, in dtype."""
    v = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape))
    v *= np.exp2(rng.uniform(-4.0, 4.0, (shape[0], 1)))  # within float16 (65504)
    return v.astype(dtypes.get(dtype).numpy)


def twin(x, out_dtype, mode, **options):
    q, scales = dq_twin.dynamic_quant_twin(x, out_dtype, mode, **options)
    return q.view(np.uint8), scales


def ref_bytes(x, out_dtype, mode, **options):
    z, scales = dq_twin.dynamic_quant_ref(x, out_dtype, mode, **options)
    return z.astype(dtypes.quantized(out_dtype).numpy).view(np.uint8), scales  # exact: z is on the grid


# --- the twin against vLLM's formulas -------------------------------------------------------------------------


CASES = [("per_tensor", {}), ("per_token", {}), ("per_token", {"scale_ub": 0.75}), ("per_group", {}),
         ("per_group", {"group_size": 64}), ("per_group", {"ue8m0": True}),
         ("per_group", {"group_size": 64, "ue8m0": True})]


@pytest.mark.parametrize("mode, options", CASES, ids=[f"{m}-{'-'.join(map(str, o.values()))}" for m, o in CASES])
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_twin_is_vllms_formula(rng, dtype, out_dtype, mode, options):
    if "scale_ub" in options and out_dtype == "int8":
        pytest.skip("vLLM has no scale_ub for int8 (refused below)")
    x = values(rng, dtype, (9, 640))
    q, scales = twin(x, out_dtype, mode, **options)
    want_q, want_scales = ref_bytes(x, out_dtype, mode, **options)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(scales.astype(np.float64).ravel(), np.asarray(want_scales).ravel())
    assert scales.dtype == F32 and scales.shape == {"per_tensor": (1,), "per_token": (9,)}.get(
        mode, (9, 640 // options.get("group_size", 128)))


def test_each_mode_keeps_its_vllm_step(rng):
    """Per tensor multiplies by the fp32 reciprocal, per token float8 divides, per token int8 multiplies by
    127 / amax: on 20000 values each spelling differs somewhere from the others, and the twin takes its own."""
    x = rng.uniform(-300, 300, (1, 20000)).astype(F32)
    amax = np.abs(x).max()
    s = F32(amax / F32(448))
    fp8 = ml_dtypes.float8_e4m3fn
    product, quotient = x * (F32(1) / s), x / s
    assert np.any(product != quotient)
    np.testing.assert_array_equal(twin(x, "float8_e4m3fn", "per_tensor")[0],
                                  np.clip(product, -448, 448).astype(fp8).view(np.uint8))
    np.testing.assert_array_equal(twin(x, "float8_e4m3fn", "per_token")[0],
                                  np.clip(quotient, -448, 448).astype(fp8).view(np.uint8))
    # int8: a row whose maximum a makes 127/a and 1/(a/127) differ, and an element that rounds apart under them
    rows = _int8_split_row()
    a = rows[0, -1]
    vllm = np.rint(rows * (F32(127) / a))
    assert np.any(vllm != np.rint(rows * (F32(1) / (a / F32(127)))))  # rms_norm_quant's per-token int8 step differs
    np.testing.assert_array_equal(twin(rows, "int8", "per_token")[0], vllm.astype(np.int8).view(np.uint8))


def _int8_split_row() -> np.ndarray:
    """One float32 row [x, a] (a its maximum) where rint(x * (127/a)) != rint(x * (1/(a/127))): searched near the
    rounding boundaries k + 0.5, where a factor one ulp apart can flip the rounding."""
    for a in np.linspace(1, 3, 2001).astype(F32):
        f, g = F32(127) / a, F32(1) / (a / F32(127))
        for k in range(126) if f != g else ():
            x0 = F32((k + 0.5) / float(f))
            for x in (x0, np.nextafter(x0, F32(0)), np.nextafter(x0, F32(200))):
                if x < a and np.rint(x * f) != np.rint(x * g):
                    return np.array([[x, a]], F32)
    raise AssertionError("no row found")


@pytest.mark.parametrize("out_dtype", QUANT)
def test_all_zero_rows_and_the_floors(out_dtype):
    """The scale of an all-zero tensor, row or group is each mode's floor, and every byte 0: per tensor 2^-126,
    per token float8 1/(qmax*512) and int8 0 (factor 0, as vLLM), per group fl(1e-10 / qmax)."""
    qt = dtypes.quantized(out_dtype)
    x = np.zeros((2, 256), F32)
    for mode, floor in (("per_tensor", F32(2.0 ** -126)), ("per_token", F32(0) if qt.integer else qt.min_scale),
                        ("per_group", F32(1e-10) / qt.qmax)):
        q, scales = twin(x, out_dtype, mode)
        assert not q.any() and np.all(scales == floor) and floor == dq_plan.scale_floor(mode, out_dtype), mode
    # a tiny tensor keeps vLLM's amax / qmax per tensor (no min_scale), and per group the eps floor
    tiny = np.full((1, 128), 1e-4, F32)
    assert twin(tiny, out_dtype, "per_tensor")[1][0] == F32(1e-4) / qt.qmax
    assert twin(tiny * F32(1e-7), out_dtype, "per_group")[1][0, 0] == F32(1e-10) / qt.qmax


def test_scale_ub_clamps_amax_before_the_division():
    x = np.array([[1000.0, -3.0, 2.0], [0.5, -0.25, 0.0]], F32)
    q, scales = twin(x, "float8_e4m3fn", "per_token", scale_ub=10.0)
    assert scales[0] == F32(10.0) / F32(448) and scales[1] == F32(0.5) / F32(448)
    assert q.view(ml_dtypes.float8_e4m3fn)[0, 0] == 448  # past the bound: saturated
    with pytest.raises(ValueError, match="scale_ub applies to mode='per_token' with a float8 output only"):
        dq_twin.dynamic_quant_twin(x, "int8", "per_token", scale_ub=1.0)
    with pytest.raises(ValueError, match="scale_ub applies to mode='per_token'"):
        dq_twin.dynamic_quant_twin(x, "float8_e4m3fn", "per_tensor", scale_ub=1.0)
    with pytest.raises(ValueError, match="scale_ub must be a finite float32 > 0"):
        dq_twin.dynamic_quant_twin(x, "float8_e4m3fn", "per_token", scale_ub=-1.0)


def test_ue8m0_scales_are_powers_of_two_at_or_above():
    rng = np.random.default_rng(3)
    x = values(rng, "float32", (4, 1024))
    plain = twin(x, "float8_e4m3fn", "per_group")[1]
    pow2 = twin(x, "float8_e4m3fn", "per_group", ue8m0=True)[1]
    mantissa, exponent = np.frexp(pow2)
    assert np.all(mantissa == 0.5) and np.all(pow2 >= plain) and np.all(pow2 < 2 * plain)
    column = dq_twin.dynamic_quant_twin(x, "float8_e4m3fn", "per_group", column_major=True)[1]
    assert np.array_equal(column, plain) and column.T.flags.c_contiguous


@pytest.mark.parametrize("out_dtype, nan_byte", [("float8_e4m3fn", 0x7F), ("float8_e5m2", 0x7E), ("int8", 0x00)])
def test_nan_is_skipped_by_the_maximum_and_written_as_one_byte(out_dtype, nan_byte):
    x = np.array([[np.nan, -np.nan, 2.0, -1.0]], F32)
    for mode in MODES[:2]:
        q, scales = twin(x, out_dtype, mode)
        qt = dtypes.quantized(out_dtype)
        assert scales[0] == F32(2.0) / qt.qmax, mode  # NaN skipped
        assert list(q[0, :2]) == [nan_byte, nan_byte] and q[0, 2] != nan_byte


def test_inf_makes_an_infinite_scale():
    """An infinite input gives an infinite scale (vLLM's too); per token float8 then writes 0 for finite values and
    the NaN byte for inf/inf, int8 writes 0 everywhere (127/inf = 0)."""
    x = np.array([[np.inf, 3.0, -2.0]], F32)
    q, scales = twin(x, "float8_e4m3fn", "per_token")
    assert np.isinf(scales[0]) and list(q[0]) == [0x7F, 0, 0x80]
    q, scales = twin(x, "int8", "per_token")
    assert np.isinf(scales[0]) and not q.any()


def test_twin_refuses_what_the_kernel_cannot_take():
    with pytest.raises(ValueError):
        dq_twin.dynamic_quant_twin(np.ones((1, 4), np.float64), "int8", "per_token")
    with pytest.raises(ValueError, match="group 128|multiple of group_size 128"):
        dq_twin.dynamic_quant_twin(np.ones((1, 100), F32), "int8", "per_group")
    with pytest.raises(ValueError, match="ue8m0 and column_major apply to mode='per_group' only"):
        dq_twin.dynamic_quant_twin(np.ones((1, 128), F32), "int8", "per_token", ue8m0=True)
    with pytest.raises(ValueError, match="mode must be one of"):
        dq_twin.dynamic_quant_twin(np.ones((1, 128), F32), "int8", "static")


# --- the plan and the kernels --------------------------------------------------------------------------------


def test_plan_names_its_kernels_and_block():
    p = dq_plan.plan_dynamic_quant("bf16", 4096, "float8_e4m3fn", "per_token")
    assert p.expression == "pyrms::dynamic_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, 1>"
    assert p.signature == ("ptr", "ptr", "ptr", "ptr", "f32", "i64", "f32", "i64", "i32", "i32", "i32", "i64", "i64")
    assert p.amax_expression == "pyrms::dynamic_quant_amax_kernel<__nv_bfloat16, __nv_fp8_e4m3>"
    assert p.amax_contract.signature == ("ptr", "ptr", "i32", "i32", "f32", "i32", "i64")
    assert p.group == tuple(f"pyrms::dynamic_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3, {m}>" for m in (3, 1, 2)) + (
        p.amax_expression,)
    assert p.block == 512 and p.FLAGS == () and p.group_size == 0 and p.group_shift == 0
    g = dq_plan.plan_dynamic_quant("float32", 1280, "int8", "per_group", 64)
    assert g.expression == "pyrms::dynamic_quant_kernel<float, signed char, 2>" and g.group_shift == 6
    assert dq_plan.plan_dynamic_quant("fp16", 256, "int8", "per_group").group_size == 128
    # the unit is the same for every mode and hidden size of (dtype, out dtype)
    assert {dq_plan.plan_dynamic_quant("fp16", h, "int8", m).group for h in (128, 769) for m in MODES
            if m != "per_group" or h == 128} == {dq_plan.plan_dynamic_quant("fp16", 1, "int8").group}
    assert [dq_plan.plan_dynamic_quant("bf16", h, "int8").block for h in (1, 9, 2049, 65537)] == [32, 32, 288, 512]


@pytest.mark.parametrize("args, kwargs, message", [
    (("bf16", 8, "bfloat16"), {}, "quantized output dtype 'bfloat16' is not supported"),
    (("bf16", 0, "int8"), {}, "hidden must be a positive int, got 0"),
    (("bf16", 128, "int8"), {"mode": "static"}, "mode must be one of ('per_tensor', 'per_token', 'per_group')"),
    (("bf16", 128, "int8"), {"mode": "per_token", "group_size": 128}, "group_size applies to mode='per_group' only"),
    (("bf16", 128, "int8"), {"mode": "per_group", "group_size": 32}, "group_size must be one of (64, 128)"),
    (("bf16", 100, "int8"), {"mode": "per_group"}, "multiple of group_size 128"),
    (("bf16", 1025 * 64, "int8"), {"mode": "per_group", "group_size": 64}, "at most 1024 groups"),
])
def test_plan_refuses(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        dq_plan.plan_dynamic_quant(*args, **kwargs)
    assert message in str(info.value)


def test_scale_floor():
    assert dq_plan.scale_floor("per_tensor", "int8") == F32(2.0 ** -126)
    assert dq_plan.scale_floor("per_token", "float8_e5m2") == F32(1) / (F32(57344) * F32(512))
    assert dq_plan.scale_floor("per_token", "int8") == 0
    assert dq_plan.scale_floor("per_group", "float8_e4m3fn") == F32(1e-10) / F32(448)
    with pytest.raises(ValueError, match="mode must be one of"):
        dq_plan.scale_floor("static", "int8")


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_compile_for_sm_90(dtype):
    """One NVRTC run per dtype, every output dtype: the row kernels read 16 bytes of input in the body (plain on
    the first pass, streaming on the second), fold maxima with atomicMax on shared memory (the maxima kernel on
    the global scale too), convert with the saturating cvt and divide correctly rounded, without flush to zero;
    griddepcontrol.wait comes before any global access."""
    plans = [dq_plan.plan_dynamic_quant(dtype, 4096, q) for q in QUANT]
    names = tuple(n for p in plans for n in p.group)
    ptx = compiler.compile_source(plans[0].source, arch="sm_90", name_expressions=names, use_cache=False,
                                  want_ptx=True).ptx
    ptx = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else ptx
    kernels = [f for f in ptx_inspect.parse_functions(ptx) if f.kind == "entry"]
    assert len(kernels) == 12
    for fn in kernels:
        assert fn.widths(True)[16] >= 1, (fn.name, fn.widths(True))
        assert fn.waits_before_memory(), fn.name
        if "amax_kernel" not in fn.name:  # the rows' second pass streams
            assert {"ld.global.cs.v4.u32", "ld.global.cs.v4.f32"} & {op.opcode for op in fn.ops}, fn.name
    assert "atom.shared.max.u32" in ptx and ("atom.global.max.u32" in ptx or "red.global.max.u32" in ptx)
    for cvt in ("cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rni.sat.s8.f32"):
        assert cvt in ptx
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and ".ftz" not in ptx and "div.full" not in ptx


def test_precompile_lists_its_units():
    units = precompile.every_unit(["dynamic_quant"])
    assert [str(u) for u in units] == [f"dynamic_quant.cu {d} {q}" for d in ("bfloat16", "float16", "float32")
                                       for q in QUANT]
    assert all(u.source == "dynamic_quant.cu" and len(u.names) == 4 for u in units)
    for hidden in (1, 9, 1280, 65537):
        for q in QUANT:
            u = precompile.unit("dynamic_quant", "bf16", hidden, out_dtype=q)
            assert u in units and u.names == dq_plan.plan_dynamic_quant("bf16", hidden, q).group


def test_registry_entry():
    spec = registry.get("dynamic_quant")
    assert spec.module == "pyrms.ops.dynamic_quant.op" and spec.source == "dynamic_quant.cu" and spec.torch is None
    assert spec.bench is None and spec.flags == () and spec.operands() == (("input", "out"), ("scale", "scale_ub"))
    assert registry.NAMES.index("static_quant") < registry.NAMES.index("dynamic_quant") < \
        registry.NAMES.index("seed_rms_norm")
    assert pyrms.dynamic_quant is dq_module.dynamic_quant and "dynamic_quant" in pyrms.__all__
    import pyrms.reference as reference
    assert reference.dynamic_quant_twin is dq_twin.dynamic_quant_twin and reference.dynamic_quant_ref is \
        dq_twin.dynamic_quant_ref


# --- the launches, on the fake driver ------------------------------------------------------------------------

ROW_KINDS = ("ptr", "ptr", "ptr", "ptr", "f32", "i64", "f32", "i64", "i32", "i32", "i32", "i64", "i64")
AMAX_KINDS = ("ptr", "ptr", "i32", "i32", "f32", "i32", "i64")


@pytest.fixture
def dfake(fake, names_only):
    """The fake, told how to read every dynamic_quant kernel's arguments (names_only: names are expressions)."""
    for dt in DTYPES:
        for q in QUANT:
            *rows, amax = dq_plan.plan_dynamic_quant(dt, 1, q).group
            fake.kernel_params.update({name: ROW_KINDS for name in rows})
            fake.kernel_params[amax] = AMAX_KINDS
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


TINY, G_FP8 = 2.0 ** -126, float(F32(1e-10) / F32(448))
MIN_SCALE = float(F32(1) / (F32(448) * F32(512)))


def test_per_tensor_clears_folds_then_quantizes(dfake):
    pyrms.dynamic_quant(O + 3, X + 2, 2000, 64, scale=S, mode="per_tensor", out_stride=67)
    clear, maxima, rows = _launches(dfake)
    assert clear[1:3] == ((1, 1, 1), (32, 1, 1)) and clear[6] == (S, X + 2, 2000, 1, TINY, 64, 64)
    assert maxima[1:3] == ((1024, 1, 1), (32, 1, 1)) and maxima[6] == (S, X + 2, 2000, 0, TINY, 64, 64)
    assert rows[1:3] == ((2000, 1, 1), (32, 1, 1))
    assert rows[6] == (O + 3, S, X + 2, 0, math.inf, 0, TINY, 0, 0, 0, 64, 64, 67)
    pyrms.dynamic_quant(O, X, 3, 64, scale=S, mode="per_tensor", dtype="float32", pdl=False)
    assert _launches(dfake)[4][1] == (3, 1, 1)  # fewer rows than MAX_AMAX_BLOCKS: one block per row
    assert [name for name, *_ in dfake.calls if name.startswith("cuLaunch")] == \
        ["cuLaunchKernelEx"] * 3 + ["cuLaunchKernel"] * 3


def test_a_bound_per_tensor_call_repeats_its_three_launches(dfake):
    """pyrms.bind records the clear, the maxima and the rows' launch, and repeats them in order."""
    pyrms.dynamic_quant(O, X, 1500, 64, scale=S, mode="per_tensor", out_dtype="int8")
    called = [(args[1], args[6]) for args in _launches(dfake)]
    dfake.calls.clear()
    bound = pyrms.bind(pyrms.dynamic_quant, O, X, 1500, 64, scale=S, mode="per_tensor", out_dtype="int8")
    assert not _launches(dfake)
    bound()
    bound()
    assert [(args[1], args[6]) for args in _launches(dfake)] == called * 2 and len(called) == 3


def test_per_token_and_per_group_arguments(dfake):
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_token")
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_token", scale_ub=U, input_stride=1030)
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_token", scale_ub=2.5, out_dtype="float8_e5m2")
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_token", out_dtype="int8")
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_group")
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_group", group_size=64, column_major_scales=True, ue8m0=True)
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_group", column_major_scales=True, scale_stride=8)
    pyrms.dynamic_quant(O, X, 4, 1024, scale=S, mode="per_group", scale_stride=9, out_dtype="int8")
    got = [args[6] for args in _launches(dfake)]
    e5m2_min = float(F32(1) / (F32(57344) * F32(512)))
    assert got == [
        (O, S, X, 0, math.inf, 0, MIN_SCALE, 1, 0, 0, 1024, 1024, 1024),
        (O, S, X, U, math.inf, 0, MIN_SCALE, 1, 0, 0, 1024, 1030, 1024),
        (O, S, X, 0, 2.5, 0, e5m2_min, 1, 0, 0, 1024, 1024, 1024),
        (O, S, X, 0, math.inf, 0, 0.0, 1, 0, 0, 1024, 1024, 1024),
        (O, S, X, 0, math.inf, 1, G_FP8, 8, 7, 0, 1024, 1024, 1024),
        (O, S, X, 0, math.inf, 4, G_FP8, 1, 6, 1, 1024, 1024, 1024),  # column-major: group stride num_tokens
        (O, S, X, 0, math.inf, 8, G_FP8, 1, 7, 0, 1024, 1024, 1024),
        (O, S, X, 0, math.inf, 1, float(F32(1e-10) / F32(127)), 9, 7, 0, 1024, 1024, 1024),
    ]
    assert all(args[1:3] == ((4, 1, 1), (128, 1, 1)) for args in _launches(dfake))


def test_arrays_launch_what_their_pointers_launch(dfake):
    pyrms.dynamic_quant(FakeArray(O, (2, 3, 256), "|i1"), FakeArray(X, (6, 256), "<f2", strides=(1024, 2)),
                        scale=FakeArray(S, (6, 1), "<f4"), mode="per_token")
    pyrms.dynamic_quant(O, X, 6, 256, scale=S, mode="per_token", out_dtype="int8", dtype="float16", input_stride=512)
    pyrms.dynamic_quant(FakeArray(O, (6, 256), "|i1"), FakeArray(X, (6, 256), "<f2"),
                        scale=FakeArray(S, (6, 2), "<f4", strides=(4, 24)), mode="per_group",
                        column_major_scales=True, scale_ub=None)
    pyrms.dynamic_quant(O, X, 6, 256, scale=S, mode="per_group", out_dtype="int8", dtype="float16",
                        column_major_scales=True, scale_stride=6)
    pyrms.dynamic_quant(FakeArray(O, (6, 256), "|i1"), FakeArray(X, (6, 256), "<f2"), scale=FakeArray(S, (1,), "<f4"),
                        mode="per_tensor", scale_ub=None)
    pyrms.dynamic_quant(O, X, 6, 256, scale=S, mode="per_tensor", out_dtype="int8", dtype="float16")
    launches = _launches(dfake)
    assert launches[0][6] == launches[1][6] and launches[2][6] == launches[3][6]
    assert [a[6] for a in launches[4:7]] == [a[6] for a in launches[7:10]]


def test_valid_edges_reach_the_driver(dfake):
    """What the refusals below change, undone, launches."""
    call(scale_ub=1e-30)
    call(scale_ub=3.0e38)
    call(scale_ub=U + 4 * 128 * 2)  # a device bound may share memory with nothing written
    call(out=X + 4 * 128 * 2, input=X)  # out right after the input
    call(out=O + 1, out_stride=131)  # any byte address, any stride
    call(scale=O + 4 * 128)  # the scales right after out
    call(mode="per_group", column_major_scales=True, scale_stride=4)
    call(mode="per_tensor", scale=S + 4)
    assert len(_launches(dfake)) == 10


def call(**overrides):
    args = dict(out=O, input=X, num_tokens=4, hidden_size=128, scale=S, mode="per_token")
    args.update(overrides)
    head = [args.pop(k) for k in ("out", "input", "num_tokens", "hidden_size")]
    return pyrms.dynamic_quant(*head, **args)


BAD = [
    (dict(mode="static"), ValueError, "mode must be one of ('per_tensor', 'per_token', 'per_group'), got 'static'"),
    (dict(mode=None), ValueError, "mode must be one of"),
    (dict(scale_ub=0.0), ValueError, "scale_ub must be finite and > 0 in float32"),
    (dict(scale_ub=-1.0), ValueError, "scale_ub must be finite and > 0 in float32"),
    (dict(scale_ub=math.nan), ValueError, "scale_ub must be finite and > 0 in float32"),
    (dict(scale_ub=1e39), ValueError, "scale_ub must be finite and > 0 in float32"),
    (dict(scale_ub="1"), TypeError, "scale_ub must be a float, a device pointer (int) or a float32 array"),
    (dict(scale_ub=1.0, out_dtype="int8"), ValueError, "scale_ub applies to float8 outputs only (as in vLLM), not int8"),
    (dict(scale_ub=U, out_dtype="int8"), ValueError, "scale_ub applies to float8 outputs only"),
    (dict(scale_ub=1.0, mode="per_tensor"), ValueError, "scale_ub applies to mode='per_token' only, not 'per_tensor'"),
    (dict(scale_ub=U, mode="per_group"), ValueError, "scale_ub applies to mode='per_token' only, not 'per_group'"),
    (dict(scale_ub=U + 2), ValueError, "scale_ub pointer 0x600002 is not aligned to 4 bytes"),
    (dict(scale_ub=S + 8), ValueError, "scale and scale_ub overlap; they must be disjoint"),
    (dict(ue8m0=True), ValueError, "ue8m0, column_major_scales and scale_stride apply to mode='per_group' only"),
    (dict(scale_stride=4, mode="per_tensor"), ValueError, "apply to mode='per_group' only, not 'per_tensor'"),
    (dict(ue8m0=1, mode="per_group"), TypeError, "ue8m0 must be True or False, got 1"),
    (dict(group_size=64), ValueError, "group_size applies to mode='per_group' only"),
    (dict(group_size=96, mode="per_group"), ValueError, "group_size must be one of (64, 128), got 96"),
    (dict(hidden_size=100, mode="per_group"), ValueError, "per_group needs hidden_size a multiple of group_size 128"),
    (dict(mode="per_group", scale_stride=0), ValueError, "scale_stride"),
    (dict(mode="per_group", column_major_scales=True, scale_stride=3), ValueError,
     "scale_stride must be >= num_tokens (4) for column-major scales"),
    (dict(scale=0), ValueError, "scale must be a non-null device pointer, got 0"),
    (dict(scale=None), TypeError, "scale must be a device pointer (int) to num_tokens float32, or a float32 array"),
    (dict(scale=None, mode="per_tensor"), TypeError, "scale must be a device pointer (int) to one float32"),
    (dict(scale=S + 2), ValueError, "scale pointer 0x500002 is not aligned to 4 bytes"),
    (dict(scale=O + 4 * 128 - 4), ValueError, "out and scale overlap; they must be disjoint"),
    (dict(scale=X + 8), ValueError, "input and scale overlap"),
    (dict(scale=FakeArray(S, (5,), "<f4")), ValueError, "scale has shape (5,); per-token scales are (4,) or (4, 1)"),
    (dict(scale=FakeArray(S, (2,), "<f4"), mode="per_tensor"), ValueError, "scale has shape (2,); expected one float32"),
    (dict(scale=FakeArray(S, (4, 1), "<f4"), mode="per_group", hidden_size=256), ValueError,
     "scale has shape (4, 1); per-group scales are (4, 2) float32"),
    (dict(scale=FakeArray(S, (4,), "<f2")), ValueError, "scale has dtype float16; per-token scales are float32"),
    (dict(out_dtype="bfloat16"), ValueError, "quantized output dtype 'bfloat16' is not supported"),
    (dict(dtype="int8"), ValueError, "int8"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(out=X + 100), ValueError, "out and input overlap; they must be disjoint"),
    (dict(input=X + 1), ValueError, "input pointer 0x200001 is not aligned to 2 bytes"),
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(num_tokens=None), TypeError, "num_tokens and hidden_size are required when every operand is a raw pointer"),
    (dict(out_stride=127), ValueError, "out_stride must be >= hidden_size (128) so rows do not overlap, got 127"),
    (dict(pdl="yes"), TypeError, "pdl must be True or False, got 'yes'"),
    (dict(out=FakeArray(O, (4, 128), "|i1"), out_dtype="float8_e5m2"), ValueError,
     "out has dtype int8, but out_dtype is float8_e5m2"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_are_refused(dfake, overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)
    assert not _launches(dfake)

"""pyrms.gated_rms_norm without a GPU: the twin against a float64 spelling of mamba_ssm's rmsnorm_fn (both orders,
groups, weight kinds), its silu against float64's, its reduction against rms_norm's twin (the family's tree), the
plan, the kernels compiled by NVRTC for sm_90 (no spills, fused multiply-adds in the gate's exp only, PDL's wait
first), the launches' packed arguments and every refusal before a launch (through the fake driver), and the registry
entry."""
import importlib
import re

import numpy as np
import pytest

import pyrms
from pyrms import compiler, dtypes, precompile
from pyrms.ops import registry
from pyrms.ops._row_twin import rms_row_twin
from pyrms.ops.gated_rms_norm import plan as g_plan
from pyrms.ops.gated_rms_norm import twin as g_twin
from tests.support.hostile_cases import FakeArray
from tests.support.kernel_resources import assert_no_spills, compile_with_report

g_module = importlib.import_module("pyrms.ops.gated_rms_norm.op")

F32 = np.float32
DTYPES = ["bfloat16", "float16", "float32"]
E6, E5 = float(F32(1e-6)), float(F32(1e-5))  # epsilon as the launch packs it (fp32)
X, Z, O, W = 1 << 20, 2 << 20, 3 << 20, 4 << 20  # made-up, 16-byte aligned device addresses


def operands(rng, dtype, rows, hidden, *, weight="same"):
    dt = dtypes.get(dtype)
    x = rng.uniform(-2, 2, (rows, hidden)).astype(dt.numpy)
    z = rng.uniform(-12, 12, (rows, hidden)).astype(dt.numpy)
    w = None if weight == "none" else rng.uniform(0.5, 1.5, hidden).astype(
        F32 if weight == "float32" else dt.numpy)
    return x, z, w


# --- the twin against the peer's formula ------------------------------------------------------------------------


def mamba_formula(x, z, w, eps, group_size, norm_before_gate):
    """mamba_ssm's _layer_norm_fwd_1pass_kernel (is_rms_norm, no bias) in float64, one program per (row, group) as
    its grid runs it: x (times z * sigmoid(z) first unless norm_before_gate), var = sum(x^2) / N, rstd,
    y = x * rstd * w, then y *= z * sigmoid(z) where norm_before_gate."""
    rows, hidden = x.shape
    out = np.empty((rows, hidden))
    for r in range(rows):
        for g in range(hidden // group_size):
            cols = slice(g * group_size, (g + 1) * group_size)
            xs, zs = x[r, cols].astype(np.float64), z[r, cols].astype(np.float64)
            ws = np.ones(group_size) if w is None else w[cols].astype(np.float64)
            if not norm_before_gate:
                xs = xs * (zs * (1.0 / (1.0 + np.exp(-zs))))
            rstd = 1.0 / np.sqrt(np.sum(xs * xs) / group_size + eps)
            y = xs * rstd * ws
            if norm_before_gate:
                y = y * (zs * (1.0 / (1.0 + np.exp(-zs))))
            out[r, cols] = y
    return out


TOLERANCE = {"bfloat16": 2 ** -8, "float16": 2 ** -11, "float32": 2 ** -21}  # half an ulp, a few fp32 ulps


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("hidden, group_size", [(256, None), (256, 64), (264, 88), (77, 11)])
@pytest.mark.parametrize("weight", ["same", "float32", "none"])
def test_twin_is_the_peers_formula(rng, dtype, norm_before_gate, hidden, group_size, weight):
    """Every element within the dtype's rounding of the peer's formula in float64 (a few fp32 ulps for fp32, half
    an ulp and the fp32 arithmetic's error for the 2-byte dtypes), nearly all exactly it rounded; the float64
    reference is that formula."""
    if weight == "float32" and dtype == "float32":
        pytest.skip("an fp32 weight beside fp32 rows is the rows' own dtype")
    x, z, w = operands(rng, dtype, 6, hidden, weight=weight)
    got = g_twin.gated_rms_norm_twin(x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)
    want = mamba_formula(x, z, w, 1e-5, group_size or hidden, norm_before_gate)
    assert got.dtype == x.dtype and got.shape == x.shape
    rel = np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-3)
    assert rel.max() <= TOLERANCE[dtype] * 1.01, rel.max()
    if dtype != "float32":
        assert np.mean(got == want.astype(x.dtype)) > 0.97
    ref = g_twin.gated_rms_norm_ref(x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_the_orders_and_groups_differ():
    """The formulas the tests compare with are not one: the orders, and one group against several, give other
    values."""
    x, z, w = operands(np.random.default_rng(1), "float32", 3, 128)
    a = g_twin.gated_rms_norm_twin(x, z, w, norm_before_gate=True)
    b = g_twin.gated_rms_norm_twin(x, z, w, norm_before_gate=False)
    c = g_twin.gated_rms_norm_twin(x, z, w, group_size=32)
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


def test_silu_within_three_ulps_of_float64():
    """The exp's error (under an ulp) and the add, division and product's roundings: at most three fp32 ulps."""
    z = np.concatenate([np.linspace(-90, 90, 200001), [-1e-30, 0.0, 1e-30]]).astype(F32)
    got = g_twin.silu_twin(z).astype(np.float64)
    z64 = z.astype(np.float64)
    want = z64 / (1.0 + np.exp(-z64))
    big = np.abs(want) > 1e-30  # in ulps; the rest (z near 0 or below -69) absolutely: from z < -87 on the
    # sigmoid is 0 (as the peer's from -88.7 on, where exp(-z) is inf), silu -0 instead of at most 1.5e-36
    ulp = np.spacing(np.abs(want[big]).astype(F32)).astype(np.float64)
    assert np.max(np.abs(got[big] - want[big]) / ulp) <= 3.0
    assert np.max(np.abs(got[~big] - want[~big])) < 1.5e-36
    tiny = np.abs(z64) < 1e-20
    assert tiny.sum() == 4 and np.all(got[tiny] == z64[tiny] * 0.5)


def test_silu_specials():
    """NaN stays NaN, silu(inf) = inf, silu(-inf) = -inf * 0 = NaN (the peer's Triton arithmetic alike), and
    saturation past the exp's clamps: silu(100) = 100, silu(-100) = -0 after a tiny sigmoid."""
    got = g_twin.silu_twin(np.array([np.nan, np.inf, -np.inf, 100.0, -100.0, 0.0], F32))
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]) and got[3] == 100.0
    assert got[4] <= 0 and got[4] > -1e-30 and got[5] == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phase", [0, 1, 3])
@pytest.mark.parametrize("group_size", [None, 24, 88])
def test_norm_first_is_rms_norms_row_times_silu(rng, dtype, phase, group_size):
    """norm_before_gate: each group is rms_norm's round-once row of the same width and alignment (its twin, with
    the plan's fold: the family's tree for (dtype, group_size, alignment)) times silu(z) in fp32, bit for bit."""
    dt = dtypes.get(dtype)
    hidden, rows, stride = 264, 4, 264 + 3
    x, z, w = operands(rng, dtype, rows, hidden)
    x[:, 5] = 300.0  # a large element: a change of tree would show in the sum's rounding
    phases = (phase + np.arange(rows) * stride) % dt.vec_elems
    got = g_twin.gated_rms_norm_twin(x, z, w, 1e-6, group_size=group_size, row_phases=phases)
    gs = group_size or hidden
    block = g_plan.plan_gated_rms_norm(dt, gs).block
    for g in range(hidden // gs):
        cols = slice(g * gs, (g + 1) * gs)
        normed = rms_row_twin(x[:, cols], w[cols], 1e-6, block=block, row_phases=(phases + g * gs) % dt.vec_elems,
                              round_once=True, out_dtype=None if dt is dtypes.FLOAT32 else "float32")
        want = (normed * g_twin.silu_twin(z[:, cols])).astype(dt.numpy)
        np.testing.assert_array_equal(got[:, cols].view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", [None, 88])
def test_gate_first_by_a_saturated_power_of_two_is_rms_norms_row(rng, dtype, group_size):
    """The gate first, with z = 32 (sigmoid(32) is 1 in fp32, so silu(z) = 32 exactly) and epsilon 0: x * 32 is
    exact and scales the sum of squares by 1024 exactly, so the output is rms_norm's round-once row of x itself,
    bit for bit: the gated values' sum in the same tree as the RMSNorm row's."""
    dt = dtypes.get(dtype)
    x, _, w = operands(rng, dtype, 5, 264)
    z = np.full_like(x, 32.0)
    assert np.all(g_twin.silu_twin(z) == 32.0)
    got = g_twin.gated_rms_norm_twin(x, z, w, 0.0, group_size=group_size, norm_before_gate=False, row_phases=3)
    gs = group_size or 264
    block = g_plan.plan_gated_rms_norm(dt, gs).block
    for g in range(264 // gs):
        cols = slice(g * gs, (g + 1) * gs)
        want = rms_row_twin(x[:, cols], w[cols], 0.0, block=block, row_phases=(3 + g * gs) % dt.vec_elems,
                            round_once=True)
        np.testing.assert_array_equal(got[:, cols].view(np.uint8), want.view(np.uint8))


def test_nan_is_the_gpus_one_nan():
    x, z, w = operands(np.random.default_rng(2), "bfloat16", 2, 64)
    x[0, 3] = np.nan
    got = g_twin.gated_rms_norm_twin(x, z, w, group_size=32)
    assert set(got[0, :32].view(np.uint16)) == {0x7FFF}  # the whole group (its inv is NaN)
    assert not np.isnan(got[0, 32:].astype(F32)).any() and not np.isnan(got[1].astype(F32)).any()


@pytest.mark.parametrize("group_size, message", [
    (0, "group_size must be a positive int dividing hidden_size (64), got 0"),
    (1.5, "group_size must be a positive int dividing hidden_size (64), got 1.5"),
    (True, "got True"),
    (24, "hidden_size=64 is not a multiple of group_size=24"),
])
def test_group_size_refused(group_size, message):
    x, z, w = operands(np.random.default_rng(0), "bfloat16", 1, 64)
    with pytest.raises(ValueError) as info:
        g_twin.gated_rms_norm_twin(x, z, w, group_size=group_size)
    assert message in str(info.value)


def test_twin_refuses_a_z_of_another_shape_or_dtype():
    x, z, w = operands(np.random.default_rng(0), "bfloat16", 2, 64)
    with pytest.raises(ValueError, match="z must be of x's shape"):
        g_twin.gated_rms_norm_twin(x, z[:1], w)
    with pytest.raises(ValueError, match="z must be of x's shape"):
        g_twin.gated_rms_norm_twin(x, z.astype(F32), w)


# --- the plan and the kernels --------------------------------------------------------------------------------------


def test_plan_is_the_rms_rows_of_group_size():
    p = g_plan.plan_gated_rms_norm("bf16", 1024, norm_before_gate=False, weight_dtype="float32")
    assert (p.block, p.cache, p.hidden) == (32, 4, 1024)  # the RMSNorm row's of 1024 elements
    assert (g_plan.plan_gated_rms_norm("bf16", 8192).block, g_plan.plan_gated_rms_norm("bf16", 8192).cache) == (256, 4)
    assert p.expression == "pyrms::gated_rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, float>"
    assert p.latency_expression == "pyrms::gated_rms_norm_kernel<__nv_bfloat16, 4, 4, false, true, false, float>"
    assert p.signature == ("ptr",) * 4 + ("f32", "i32", "i32", "i64", "i64", "i64")
    assert p.FLAGS == ("norm_before_gate",) and len(p.group) == 14 and p.expression in p.group
    none = g_plan.plan_gated_rms_norm("fp16", 7, weight_dtype="none")
    assert none.expression == "pyrms::gated_rms_norm_kernel<__half, 1, 1, true, false, false, void>"
    assert none.weight_dtype is None and p.weight_dtype is dtypes.FLOAT32
    assert p.aligned_layout(1024, 2048, 1024) and not p.aligned_layout(1024, 1027, 1024)


@pytest.mark.parametrize("args, kwargs, message", [
    (("float32", 64), dict(weight_dtype="bfloat16"), "weight dtype must be float32 (the input's) or float32"),
    (("bf16", 64), dict(weight_dtype="float16"), "weight dtype must be bfloat16 (the input's) or float32"),
    (("int8", 64), {}, "int8"),
])
def test_plan_refuses(args, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        g_plan.plan_gated_rms_norm(*args, **kwargs)


def _check_kernels(dtypes_, tmp_path, monkeypatch, every_weight=True):
    """Every shape and order of these dtypes, of every weight kind (else the rows' dtype's only): no spills,
    griddepcontrol.wait before any global access, 16-byte loads and stores; fused multiply-adds in gate_exp only
    (every other product and sum rounded on its own), a correctly rounded reciprocal and square root."""
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    names = tuple(dict.fromkeys(e for dt in dtypes_ for options in registry.get("gated_rms_norm").option_sets(
        dtypes.get(dt)) if every_weight or options["weight_dtype"] is None
        for e in g_plan.plan_gated_rms_norm(dt, 64, **options).group))
    prog = compile_with_report("gated_rms_norm.cu", names)
    functions = assert_no_spills(prog, names)
    for expression, lowered in prog.lowered_names.items():
        fn = functions[lowered]
        assert fn.waits_before_memory(), expression
        assert fn.widths(True)[16] >= 1 and fn.widths(False)[16] >= 1, expression
    assert set() != fma_lines(prog.ptx) <= gate_lines() and "sqrt.rn.f32" in prog.ptx
    assert "rcp.approx.ftz.f32" in prog.ptx and "rcp.rn.f32" not in prog.ptx and "div.rn.f32" in prog.ptx


def gate_lines() -> set:
    """The source lines of gate_exp's and reciprocal_in_range's bodies in gate.cuh (the functions that fuse
    multiply-adds)."""
    lines = compiler.read_source("gate.cuh").splitlines()
    found = set()
    for head in ("float gate_exp(float a)", "float reciprocal_in_range(float d)"):
        first = next(i for i, line in enumerate(lines, 1) if head in line)
        last = next(i for i, line in enumerate(lines, 1) if i > first and line == "}")
        found |= {("gate.cuh", i) for i in range(first, last + 1)}
    return found


def fma_lines(ptx: str) -> set:
    """(file name, line) of the source line each fma.rn.f32 of the PTX was compiled from (its last .loc)."""
    files = {m[1]: m[2].rsplit("/", 1)[-1] for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M)}
    found, loc = set(), None
    for line in ptx.splitlines():
        if m := re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", line):
            loc = (files.get(m[1]), int(m[2]))
        elif "fma.rn.f32" in line:
            found.add(loc)
    return found


def test_kernels_compile_for_sm_90_without_spills(tmp_path, monkeypatch):
    """bfloat16's kernels with a bfloat16 weight, both orders (the slow test below: every dtype and weight kind)."""
    _check_kernels(("bfloat16",), tmp_path, monkeypatch, every_weight=False)


@pytest.mark.slow  # 224 kernels, about 1.5 min on 2 cores
def test_every_variant_compiles_without_spills(tmp_path, monkeypatch):
    _check_kernels(DTYPES, tmp_path, monkeypatch)


def test_precompile_lists_its_units():
    units = precompile.every_unit(["gated_rms_norm"])
    assert len(units) == 16 and len({u.label for u in units}) == 16
    assert "gated_rms_norm.cu bfloat16 norm_before_gate weight=float32" in {u.label for u in units}
    assert "gated_rms_norm.cu float32 weight=none" in {u.label for u in units}
    u = precompile.unit("gated_rms_norm", "bf16", 1024, norm_before_gate=True)
    assert u in units and g_plan.plan_gated_rms_norm("bf16", 1024).expression in u.names
    with pytest.raises(TypeError, match="gated_rms_norm has no option 'gemma'"):
        precompile.unit("gated_rms_norm", "bf16", 64, gemma=True)


def test_registry_entry():
    spec = registry.get("gated_rms_norm")
    assert spec.module == "pyrms.ops.gated_rms_norm.op" and spec.source == "gated_rms_norm.cu"
    assert spec.torch == "pyrms.ops.gated_rms_norm.torch_binding" and spec.check == "row"
    assert spec.flags == ("norm_before_gate",) and spec.operands() == (("x", "z", "out"), ("weight",))
    assert spec.operands(weight=False) == (("x", "z", "out"), ())
    assert registry.NAMES.index("gated_rms_norm") < registry.NAMES.index("seed_rms_norm")  # the seed stays last
    assert pyrms.gated_rms_norm is g_module.gated_rms_norm and "gated_rms_norm" in pyrms.__all__
    assert "gated_rms_norm_twin" in dir(importlib.import_module("pyrms.reference"))


# --- the launches, on the fake driver --------------------------------------------------------------------------------


@pytest.fixture
def gfake(fake, names_only):
    fake.param_kinds = g_plan.plan_gated_rms_norm("bf16", 64).signature
    return fake


def _args(fake) -> list[tuple]:
    """Each launch's arguments, read as the plan's signature (FakeDriver.param_kinds)."""
    return [args[6] for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def call(**overrides):
    args = dict(x=X, z=Z, weight=W, eps=1e-6, out=O, num_tokens=10, hidden_size=4096)
    args.update(overrides)
    return pyrms.gated_rms_norm(args.pop("x"), args.pop("z"), args.pop("weight"), args.pop("eps"), **args)


def test_launch_arguments(gfake):
    call()  # 10 rows of one group: the few-row kernel, 4 x 128 threads
    call(group_size=512, num_tokens=40, x_stride=4100, z_stride=5000, out_stride=4104, norm_before_gate=False,
         eps=1e-5, dtype="float16", weight_dtype="float32", pdl=False)  # 320 (row, group) blocks: many rows
    call(weight=None, x=X + 2, num_tokens=1, hidden_size=7)
    first, second, third = gfake.launches
    args = _args(gfake)
    assert first.kernel == g_plan.plan_gated_rms_norm("bf16", 4096).aligned_latency_expression
    assert (first.grid, first.block) == ((10, 1, 1), (512, 1, 1))
    assert args[0] == (O, X, Z, W, E6, 4096, 1, 4096, 4096, 4096)
    p = g_plan.plan_gated_rms_norm("fp16", 512, norm_before_gate=False, weight_dtype="float32")
    assert second.kernel == p.expression and (second.grid, second.block) == ((320, 1, 1), (p.block, 1, 1))
    assert args[1] == (O, X, Z, W, E5, 512, 8, 4100, 5000, 4104) and not second.pdl
    assert third.kernel == g_plan.plan_gated_rms_norm("bf16", 7, weight_dtype="none").latency_expression
    assert args[2] == (O, X + 2, Z, 0, E6, 7, 1, 7, 7, 7)


def test_aligned_kernel_only_for_aligned_pointers(gfake):
    p = g_plan.plan_gated_rms_norm("bf16", 4096)
    call()
    call(z=Z + 2)
    call(out=O + 2)
    call(weight=W + 2)
    call(z_stride=4097)
    assert [launch.kernel == p.aligned_latency_expression for launch in gfake.launches] == [True] + [False] * 4


def test_arrays_launch_what_their_pointers_launch(gfake):
    pyrms.gated_rms_norm(FakeArray(X, (3, 64), "<f2", strides=(2 * 72, 2)), FakeArray(Z, (3, 64), "<f2"),
                         FakeArray(W, (64,), "<f4"), 1e-5, out=FakeArray(O, (3, 64), "<f2"), group_size=16)
    call(num_tokens=3, hidden_size=64, x_stride=72, group_size=16, dtype="float16", weight_dtype="float32", eps=1e-5)
    arrays, pointers = gfake.launches
    assert (arrays.kernel, arrays.grid, arrays.block) == (pointers.kernel, pointers.grid, pointers.block)
    assert _args(gfake)[0] == _args(gfake)[1] == (O, X, Z, W, E5, 16, 4, 72, 64, 64)


def test_valid_edges_reach_the_driver(gfake):
    call(out=X + 2 * 10 * 4096)  # out right after x's last row
    call(x=Z, z=Z)  # x and z may be the same memory (both only read)
    call(eps=0.0, group_size=1)
    call(weight=W, weight_dtype="float32")
    assert len(gfake.launches) == 4


BAD = [
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(num_tokens=None), TypeError, "num_tokens"),
    (dict(hidden_size=None), TypeError, "hidden_size"),
    (dict(group_size=1000), ValueError, "hidden_size=4096 is not a multiple of group_size=1000"),
    (dict(group_size=0), ValueError, "group_size must be a positive int dividing hidden_size (4096), got 0"),
    (dict(group_size=1, num_tokens=600000), ValueError, "num_tokens * (hidden_size / group_size) must be at most"),
    (dict(x_stride=4000), ValueError, "x_stride"),
    (dict(z_stride=4000), ValueError, "z_stride"),
    (dict(out_stride=100), ValueError, "out_stride"),
    (dict(eps=-1.0), ValueError, "epsilon must be finite and >= 0"),
    (dict(norm_before_gate="yes"), TypeError, "norm_before_gate must be True or False, got 'yes'"),
    (dict(pdl=1), TypeError, "pdl must be True or False, got 1"),
    (dict(dtype="int8"), ValueError, "int8"),
    (dict(weight_dtype="float16"), ValueError, "weight dtype must be bfloat16 (the input's) or float32"),
    (dict(weight=None, weight_dtype="float32"), ValueError, "weight_dtype='float32' was given for weight=None"),
    (dict(weight=W, weight_dtype="none"), ValueError, "weight_dtype='none' is a call without a weight"),
    (dict(out=None), TypeError, "out must be a device pointer (int), got NoneType"),
    (dict(out=0), ValueError, "out must be a non-null device pointer, got 0"),
    (dict(x=X + 1), ValueError, "x pointer 0x100001 is not aligned to 2 bytes, as bfloat16 elements must be"),
    (dict(weight=W + 2, weight_dtype="float32"), ValueError, "weight pointer 0x400002 is not aligned to 4 bytes"),
    (dict(out=X + 2 * 100), ValueError, "out and x overlap"),
    (dict(out=Z), ValueError, "out and z overlap"),
    (dict(weight=O + 2 * 4096 * 9), ValueError, "out and weight overlap"),  # in out's last row
    (dict(z=FakeArray(Z, (10, 4096), "<f4"), x=FakeArray(X, (10, 4096), "<f2")), ValueError,
     "z has dtype float32, but the dtype is float16"),
    (dict(z=FakeArray(Z, (9, 4096), "<f2"), x=FakeArray(X, (10, 4096), "<f2"), num_tokens=None, hidden_size=None),
     ValueError, "z has shape (9, 4096), expected (10, 4096)"),
    (dict(x=FakeArray(X, (10, 4096), "<f2"), weight=FakeArray(W, (64,), "<f2"), num_tokens=None, hidden_size=None),
     ValueError, "weight has shape (64,), expected (4096,)"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_are_refused(gfake, overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)
    assert not gfake.launches

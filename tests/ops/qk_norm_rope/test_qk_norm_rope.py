"""pyrms.qk_norm_rope without a GPU: the twin against a float64 spelling of vLLM's fused_qk_norm_rope (its
lane-by-lane index arithmetic, NeoX and GPT-J), the norm's tree against rms_norm's twin, the plan, the kernels
compiled by NVRTC for sm_90 (no spills, 16-byte accesses where aligned, PDL's wait first), the launches' packed
arguments and every refusal before a launch (through the fake driver), and the registry entry."""
import importlib

import numpy as np
import pytest

import pyrms
from pyrms import dtypes, precompile
from pyrms.ops import registry
from pyrms.ops.qk_norm_rope import plan as qk_plan
from pyrms.ops.qk_norm_rope import twin as qk_twin
from pyrms.ops.qk_norm_rope.twin import rope_cache
from pyrms.ops.rms_norm import twin as rms_twin
from tests.support.hostile_cases import FakeArray
from tests.support.kernel_resources import assert_no_spills, compile_with_report

qk_module = importlib.import_module("pyrms.ops.qk_norm_rope.op")

F32 = np.float32
DTYPES = ["bfloat16", "float16", "float32"]
NQ, NKV = 4, 2
E6, E5 = float(F32(1e-6)), float(F32(1e-5))  # epsilon as the launch packs it (fp32)
Q, W1, W2, C, P = 1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20  # made-up, 16-byte aligned device addresses
KC, VC, S, KS, VS = 6 << 20, 7 << 20, 8 << 20, 9 << 20, 10 << 20  # the caches, slot_mapping, device scales
NO_KV, NO_LAYOUT = (0, 0, 0, 0, 0, 1.0, 1.0), (1, 0, 0, 0)  # a launch's cache arguments and layout without a cache


def operands(rng, dtype, tokens, head_dim, rot, *, stride=None, max_position=40):
    dt = dtypes.get(dtype)
    width = (NQ + 2 * NKV) * head_dim
    qkv = rng.uniform(-2, 2, (tokens, stride or width)).astype(dt.numpy)
    qw = rng.uniform(0.5, 1.5, head_dim).astype(dt.numpy)
    kw = rng.uniform(-0.5, 1.5, head_dim).astype(dt.numpy)
    positions = rng.integers(0, max_position, tokens)
    return qkv, qw, kw, rope_cache(max_position, rot), positions


# --- the twin against vLLM's formula ------------------------------------------------------------------------------


def vllm_formula(qkv, qw, kw, cache, positions, head_dim, rot, is_neox, epsilon, gemma=False):
    """vLLM's fusedQKNormRopeKernel spelled in float64, element by element as its lanes index them: the head
    normalized as x * (rms_rcp * w); NeoX: element d of a lane exchanges with d ^ (rot / 2) (its shuffle partner,
    negated below rot / 2) and reads cos/sin at ((2 d) % rot) / 2; GPT-J: the pair (2k, 2k + 1) at k."""
    out = qkv.astype(np.float64)
    half = rot // 2
    for t in range(qkv.shape[0]):
        cos_ptr, sin_ptr = cache[positions[t]].astype(np.float64)[:half], cache[positions[t]].astype(np.float64)[half:]
        for h in range(NQ + NKV):
            x = qkv[t, h * head_dim:(h + 1) * head_dim].astype(np.float64)
            w = (qw if h < NQ else kw).astype(np.float64) + (1.0 if gemma else 0.0)
            rms_rcp = 1.0 / np.sqrt(np.sum(x * x) / head_dim + epsilon)
            e = x * (rms_rcp * w)
            new = e.copy()
            for d in range(rot):
                if is_neox:
                    partner = -e[d ^ half] if d < half else e[d ^ half]
                    k = ((d * 2) % rot) // 2
                    new[d] = e[d] * cos_ptr[k] + partner * sin_ptr[k]
                elif d % 2 == 0:
                    k = d // 2
                    new[d], new[d + 1] = e[d] * cos_ptr[k] - e[d + 1] * sin_ptr[k], e[d] * sin_ptr[k] + e[d + 1] * cos_ptr[k]
            out[t, h * head_dim:(h + 1) * head_dim] = new
    return out


def ulps(dt, got, want):
    """|got - want| in units of the last place of dt at want's magnitude."""
    mant = {"bfloat16": 7, "float16": 10, "float32": 23}[dt.name]
    e = np.floor(np.log2(np.maximum(np.abs(want), np.finfo(np.float32).tiny)))
    return np.abs(got.astype(np.float64) - want) / np.exp2(np.maximum(e, -14 if dt.name == "float16" else -126) - mant)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_dim, rot", [(64, 64), (128, 128), (128, 64), (256, 128)])
@pytest.mark.parametrize("gemma", [False, True])
def test_twin_is_vllms_formula(rng, dtype, is_neox, head_dim, rot, gemma):
    """Every q and k element within one ulp of vLLM's formula in float64, or within the fp32 arithmetic's error
    (a few fp32 ulps of the head's largest value: a rotation may cancel), nearly all exactly it rounded to the
    dtype (the 2-byte dtypes); v untouched."""
    dt = dtypes.get(dtype)
    qkv, qw, kw, cache, positions = operands(rng, dtype, 5, head_dim, rot)
    got = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                                    head_dim=head_dim, rotary_dim=rot, is_neox=is_neox, epsilon=1e-6, gemma=gemma)
    want = vllm_formula(qkv, qw, kw, cache, positions, head_dim, rot, is_neox, 1e-6, gemma)
    assert got.dtype == qkv.dtype and got.shape == qkv.shape
    qk = slice(0, (NQ + NKV) * head_dim)
    g, w = got[:, qk], want[:, qk]
    fp32_error = 4e-6 * np.abs(w).max(axis=1, keepdims=True)
    assert not np.any((ulps(dt, g, w) > 1.0) & (np.abs(g.astype(np.float64) - w) > fp32_error))
    if dt.itemsize == 2:
        assert np.mean(g == w.astype(dt.numpy)) > 0.97
    np.testing.assert_array_equal(got[:, qk.stop:].view(np.uint8), qkv[:, qk.stop:].view(np.uint8))
    ref = qk_twin.qk_norm_rope_ref(qkv, qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                                   head_dim=head_dim, rotary_dim=rot, is_neox=is_neox, epsilon=1e-6, gemma=gemma)
    np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)  # the reference is the same formula


def test_the_rotation_moves_values():
    """The formula the tests compare with is not the identity: position 5 rotates, position 0 does not."""
    rng = np.random.default_rng(1)
    qkv, qw, kw, cache, _ = operands(rng, "float32", 2, 64, 64)
    kwargs = dict(num_q_heads=NQ, num_kv_heads=NKV, head_dim=64, epsilon=1e-6)
    at0 = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, np.array([0, 0]), **kwargs)
    at5 = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, np.array([5, 5]), **kwargs)
    assert not np.array_equal(at0, at5)
    neox = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, np.array([5, 5]), is_neox=False, **kwargs)
    assert not np.array_equal(neox, at5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("phase", [0, 1, 3])
def test_norm_is_rms_norms_row_at_the_heads_alignment(rng, dtype, phase):
    """At position 0 (cos 1, sin 0) the rotation is exact: the heads are rms_norm's round-once rows of the same
    alignment (its twin, fold 32: the family's tree for (dtype, head_dim, alignment)), bit for bit."""
    head_dim, dt = 80, dtypes.get(dtype)
    stride = (NQ + 2 * NKV) * head_dim + 3
    qkv, qw, kw, cache, _ = operands(rng, dtype, 3, head_dim, head_dim, stride=stride)
    qkv[:, 5] = 300.0  # a large element: a change of tree would show in the sum's rounding
    phases = (phase + np.arange(3) * stride) % dt.vec_elems
    got = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, np.zeros(3, np.int64), num_q_heads=NQ, num_kv_heads=NKV,
                                    head_dim=head_dim, epsilon=1e-6, phase=phases)
    for h in range(NQ + NKV):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        row_phases = (phases + h * head_dim) % dt.vec_elems
        want = rms_twin.rms_norm_twin(qkv[:, cols], qw if h < NQ else kw, 1e-6, block=32, row_phases=row_phases,
                                      round_once=True)
        np.testing.assert_array_equal(got[:, cols].view(np.uint8), want.view(np.uint8))


def test_nan_is_the_gpus_one_nan():
    qkv, qw, kw, cache, positions = operands(np.random.default_rng(2), "bfloat16", 2, 64, 64)
    qkv[0, 3] = np.nan
    got = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV, head_dim=64)
    assert set(got[0, :64].view(np.uint16)) == {0x7FFF}  # the whole head (its inv_rms is NaN)
    assert not np.isnan(got[0, 64:].astype(F32)).any() and not np.isnan(got[1].astype(F32)).any()


@pytest.mark.parametrize("rotary_dim", [0, 3, 66, 1.5, True])
def test_twin_refuses_a_rotary_dim(rotary_dim):
    qkv, qw, kw, cache, positions = operands(np.random.default_rng(0), "bfloat16", 1, 64, 64)
    with pytest.raises(ValueError, match="rotary_dim must be an even int from 2 to head_dim \\(64\\)"):
        qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV, head_dim=64,
                                  rotary_dim=rotary_dim)


def test_twin_refuses_a_short_qkv():
    with pytest.raises(ValueError, match="qkv must be \\[tokens, >= .* = 512\\], got shape \\(1, 511\\)"):
        qk_twin.qk_norm_rope_twin(np.zeros((1, 511), F32), np.ones(64, F32), np.ones(64, F32), rope_cache(2, 64),
                                  [0], num_q_heads=NQ, num_kv_heads=NKV, head_dim=64)


# --- the plan and the kernels --------------------------------------------------------------------------------------


def test_plan_takes_rms_norms_packed_shape():
    assert [(p.lanes, p.cache) for p in (qk_plan.plan_qk_norm_rope("bf16", h) for h in (64, 80, 128, 256, 512))] == \
        [(8, 1), (8, 2), (8, 2), (32, 1), (32, 2)]
    assert (qk_plan.plan_qk_norm_rope("float32", 128).lanes, qk_plan.plan_qk_norm_rope("float32", 128).cache) == (32, 1)
    p = qk_plan.plan_qk_norm_rope("fp16", 128, gemma=True, is_neox=False)
    assert p.expression == "pyrms::qk_norm_rope_kernel<__half, 2, 8, false, true, false>"
    assert p.aligned_expression == "pyrms::qk_norm_rope_kernel<__half, 2, 8, true, true, false>"
    assert len(p.group) == 10 and p.expression in p.group and p.aligned_expression in p.group
    assert p.signature == ("ptr",) * 10 + ("f32",) * 3 + ("i32",) * 6 + ("i64", "i32") + ("i64",) * 3
    assert p.block == 256 and p.rows_per_block == 32 and p.fold == 32
    assert p.FLAGS == ("gemma", "is_neox", "kv_cache") and p.kv_element is dtypes.FLOAT16
    assert p.aligned_layout(1024) and not p.aligned_layout(1027) and not qk_plan.plan_qk_norm_rope("bf16", 81).aligned_layout(1024)


def test_plan_of_the_kv_cache():
    """kv_cache: KV_CACHE and the caches' element in the name expression; one group holds both cache dtypes (20
    kernels) and no kernel without the cache; vLLM's spellings of the fp8 cache are one."""
    auto = qk_plan.plan_qk_norm_rope("bf16", 128, kv_cache=True)
    fp8 = qk_plan.plan_qk_norm_rope("bf16", 128, kv_cache=True, kv_cache_dtype="fp8")
    assert auto.expression == "pyrms::qk_norm_rope_kernel<__nv_bfloat16, 2, 8, false, false, true, true>"
    assert fp8.aligned_expression == \
        "pyrms::qk_norm_rope_kernel<__nv_bfloat16, 2, 8, true, false, true, true, __nv_fp8_e4m3>"
    assert fp8 == qk_plan.plan_qk_norm_rope("bf16", 128, kv_cache=True, kv_cache_dtype="fp8_e4m3")
    assert auto.kv_element is dtypes.BFLOAT16 and fp8.kv_element is dtypes.FLOAT8_E4M3FN
    assert auto.group == fp8.group and len(auto.group) == 20 and {auto.expression, fp8.expression} <= set(auto.group)
    plain = qk_plan.plan_qk_norm_rope("bf16", 128, kv_cache_dtype="fp8")  # no cache: the cache dtype is moot
    assert plain.kv_cache_dtype == "auto" and not set(plain.group) & set(auto.group)


@pytest.mark.parametrize("value", ["fp8_e5m2", "FP8", "int8", None, 8])
def test_plan_refuses_a_kv_cache_dtype(value):
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of 'auto', 'fp8', 'fp8_e4m3', got"):
        qk_plan.plan_qk_norm_rope("bf16", 128, kv_cache=True, kv_cache_dtype=value)


@pytest.mark.parametrize("args, message", [
    (("bf16", 1025), "head_dim must be at most 1024 for bfloat16"),
    (("float32", 513), "head_dim must be at most 512 for float32"),
    (("bf16", 0), "head_dim must be a positive int, got 0"),
    (("int8", 64), "int8"),
])
def test_plan_refuses(args, message):
    with pytest.raises(ValueError, match=message):
        qk_plan.plan_qk_norm_rope(*args)


def _check_kernels(flag_sets, dtypes_, tmp_path, monkeypatch):
    """Every packed shape, aligned or not, of these (gemma, is_neox, kv_cache) and dtypes: no spills,
    griddepcontrol.wait before any global access; 16-byte loads and stores, and the ALIGNED kernels store only
    16-byte vectors into qkv (with the cache, beside element stores of the cache's dtype); no FMA (every product
    and sum rounded on its own) and a correctly rounded square root (and division, the fp8 cache's)."""
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    names = tuple(e for dt in dtypes_ for g, n, kv in flag_sets
                  for e in qk_plan.plan_qk_norm_rope(dt, 128, gemma=g, is_neox=n, kv_cache=kv).group)
    prog = compile_with_report("qk_norm_rope.cu", names)
    functions = assert_no_spills(prog, names)
    for expression, lowered in prog.lowered_names.items():
        fn = functions[lowered]
        assert fn.waits_before_memory(), expression
        assert fn.widths(True)[16] >= 1 and fn.widths(False)[16] >= 1, expression
        template = expression.partition("<")[2].rstrip(">").split(", ")
        if template[3] == "true":  # ALIGNED
            itemsize = {d.ctype: d.itemsize for d in dtypes.ALL}[template[0]]
            cache = {1 if template[-1] == "__nv_fp8_e4m3" else itemsize} if template[6:7] == ["true"] else set()
            assert set(fn.widths(False)) == {16} | cache, (expression, fn.widths(False))
    assert "fma.rn.f32" not in prog.ptx and "sqrt.rn.f32" in prog.ptx
    assert ("div.rn.f32" in prog.ptx) == any(name.endswith("__nv_fp8_e4m3>") for name in names)


def test_kernels_compile_for_sm_90_without_spills(tmp_path, monkeypatch):
    """bfloat16's kernels of both flags, and with the cache of both dtypes (40 kernels)."""
    _check_kernels(((False, True, False), (True, False, False), (False, True, True)), ("bfloat16",), tmp_path,
                   monkeypatch)


@pytest.mark.slow  # 360 kernels, 4 min on 2 cores
def test_every_variant_compiles_without_spills(tmp_path, monkeypatch):
    _check_kernels([(g, n, kv) for g in (False, True) for n in (False, True) for kv in (False, True)], DTYPES,
                   tmp_path, monkeypatch)


def test_precompile_lists_its_units():
    units = precompile.every_unit(["qk_norm_rope"])
    assert [str(u) for u in units] == sorted(f"qk_norm_rope.cu {d}{f}{kv}" for d in ("bfloat16", "float16", "float32")
                                             for f in ("", " is_neox", " gemma", " gemma is_neox")
                                             for kv in ("", " kv_cache"))
    fp8 = qk_plan.plan_qk_norm_rope("fp16", 128, kv_cache=True, kv_cache_dtype="fp8").expression
    assert fp8 in precompile.unit("qk_norm_rope", "fp16", 128, is_neox=True, kv_cache=True).names
    for head_dim in (64, 128, 256):
        u = precompile.unit("qk_norm_rope", "bf16", head_dim, is_neox=True)
        assert u in units and qk_plan.plan_qk_norm_rope("bf16", head_dim).expression in u.names
    with pytest.raises(TypeError, match="qk_norm_rope has no option 'round_once'"):
        precompile.unit("qk_norm_rope", "bf16", 64, round_once=True)


def test_registry_entry():
    spec = registry.get("qk_norm_rope")
    assert spec.module == "pyrms.ops.qk_norm_rope.op" and spec.source == "qk_norm_rope.cu"
    assert spec.torch == "pyrms.ops.qk_norm_rope.torch_binding"
    assert spec.flags == ("gemma", "is_neox", "kv_cache") and spec.operands()[0] == ("qkv",)
    assert registry.NAMES.index("qk_norm_rope") < registry.NAMES.index("seed_rms_norm")  # the seed stays last
    assert pyrms.qk_norm_rope is qk_module.qk_norm_rope and "qk_norm_rope" in pyrms.__all__
    assert "qk_norm_rope_twin" in dir(importlib.import_module("pyrms.reference"))


# --- the launches, on the fake driver --------------------------------------------------------------------------------


@pytest.fixture
def qfake(fake):
    fake.param_kinds = qk_plan.plan_qk_norm_rope("bf16", 64).signature
    return fake


def _launches(fake):
    return [args for name, args in fake.calls if name in ("cuLaunchKernel", "cuLaunchKernelEx")]


def call(**overrides):
    args = dict(qkv=Q, q_weight=W1, k_weight=W2, cos_sin_cache=C, positions=P, num_q_heads=NQ, num_kv_heads=NKV,
                head_dim=128, num_tokens=10)
    args.update(overrides)
    head = [args.pop(k) for k in ("qkv", "q_weight", "k_weight", "cos_sin_cache", "positions")]
    return pyrms.qk_norm_rope(*head, **args)


def test_launch_arguments(qfake):
    call()
    call(qkv=Q + 2, num_tokens=3, head_dim=64, rotary_dim=32, token_stride=1000, is_neox=False, epsilon=1e-5,
         dtype="float16", pdl=False)
    call(num_tokens=1, token_stride=1027)  # a stride off the vector: never the ALIGNED kernel
    first, second, third = _launches(qfake)
    # 10 tokens x 6 heads = 60 rows, 32 a block (8 lanes each): 2 blocks of 256 threads
    assert first[1:3] == ((2, 1, 1), (256, 1, 1)) and first[6] == (Q, W1, W2, C, P, *NO_KV, E6, 60, 6, 4, 2, 128, 128,
                                                                   1024, *NO_LAYOUT)
    assert second[1:3] == ((1, 1, 1), (256, 1, 1)) and second[6] == (Q + 2, W1, W2, C, P, *NO_KV, E5, 18, 6, 4, 2, 64,
                                                                     32, 1000, *NO_LAYOUT)
    assert third[6] == (Q, W1, W2, C, P, *NO_KV, E6, 6, 6, 4, 2, 128, 128, 1027, *NO_LAYOUT)
    assert [name for name, *_ in qfake.calls if name.startswith("cuLaunch")] == \
        ["cuLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernelEx"]


def test_aligned_kernel_only_for_aligned_pointers(qfake, monkeypatch):
    got = []
    real = qk_module.Prepared.__call__

    def spy(self, pointers, epsilon, num_tokens, stream):
        got.append(self.aligned is not None and not (pointers[0] | pointers[1] | pointers[2]) & 15)
        return real(self, pointers, epsilon, num_tokens, stream)

    monkeypatch.setattr(qk_module.Prepared, "__call__", spy)
    call()
    call(q_weight=W1 + 2)
    call(token_stride=1027)
    assert got == [True, False, False]


def test_arrays_launch_what_their_pointers_launch(qfake):
    width = (NQ + 2 * NKV) * 64
    pyrms.qk_norm_rope(FakeArray(Q, (3, NQ + 2 * NKV, 64), "<f2", strides=(2 * (width + 8), 128, 2)),
                       FakeArray(W1, (64,), "<f2"), FakeArray(W2, (64,), "<f2"), FakeArray(C, (40, 32), "<f4"),
                       FakeArray(P, (3,), "<i8"), num_q_heads=NQ, num_kv_heads=NKV, head_dim=64)
    call(head_dim=64, rotary_dim=32, num_tokens=3, token_stride=width + 8, dtype="float16")
    arrays, pointers = _launches(qfake)
    assert arrays[1:3] == pointers[1:3] and arrays[6] == pointers[6] == (Q, W1, W2, C, P, *NO_KV, E6, 18, 6, 4, 2, 64,
                                                                         32, width + 8, *NO_LAYOUT)


def test_valid_edges_reach_the_driver(qfake):
    call(qkv=C + 4 * 128, q_weight=Q - 256, k_weight=Q - 256)  # qkv right after the cache's first row; weights shared
    call(positions=Q + 2 * (9 * 1024 + 6 * 128))  # in the last token's v heads, right after its k heads (v is not written)
    call(rotary_dim=2, epsilon=0.0)
    call(head_dim=1024, dtype="bf16")
    assert len(_launches(qfake)) == 4


BAD = [
    (dict(num_tokens=0), ValueError, "num_tokens must be between 1"),
    (dict(num_tokens=None), TypeError, "num_tokens is required when qkv is a raw pointer"),
    (dict(num_q_heads=0), ValueError, "num_q_heads must be between 1"),
    (dict(num_kv_heads=2.0), TypeError, "num_kv_heads must be an int, got float 2.0"),
    (dict(head_dim=2048), ValueError, "head_dim must be at most 1024 for bfloat16"),
    (dict(rotary_dim=130), ValueError, "rotary_dim must be an even int from 2 to head_dim (128), got 130"),
    (dict(rotary_dim=7), ValueError, "rotary_dim must be an even int from 2 to head_dim (128), got 7"),
    (dict(token_stride=1000), ValueError, "token_stride must be >= (num_q_heads + 2 * num_kv_heads) * head_dim (1024)"),
    (dict(epsilon=-1.0), ValueError, "epsilon must be finite and >= 0"),
    (dict(gemma="yes"), TypeError, "gemma must be True or False, got 'yes'"),
    (dict(is_neox=None), TypeError, "is_neox must be True or False, got None"),
    (dict(pdl=1), TypeError, "pdl must be True or False, got 1"),
    (dict(dtype="int8"), ValueError, "int8"),
    (dict(qkv=0), ValueError, "qkv must be a non-null device pointer, got 0"),
    (dict(qkv=Q + 1), ValueError, "qkv pointer 0x100001 is not aligned to 2 bytes, as its bfloat16 elements must be"),
    (dict(cos_sin_cache=C + 2), ValueError, "cos_sin_cache pointer 0x400002 is not aligned to 4 bytes, as its float32"),
    (dict(positions=P + 4), ValueError, "positions pointer 0x500004 is not aligned to 8 bytes, as its int64"),
    (dict(q_weight=Q + 2 * 100), ValueError, "qkv and q_weight overlap; they must be disjoint"),
    (dict(k_weight=Q + 2 * 9 * 1024 + 2 * 700), ValueError, "qkv and k_weight overlap"),  # in the last token's k heads
    (dict(cos_sin_cache=Q - 4 * 10), ValueError, "qkv and cos_sin_cache overlap"),
    (dict(positions=Q + 8), ValueError, "qkv and positions overlap"),
    (dict(q_weight=3.5), TypeError, "q_weight must be a device pointer (int), got float"),
    (dict(qkv=FakeArray(Q, (10, 1023), "<f2")), ValueError, "qkv has shape (10, 1023) and strides"),
    (dict(qkv=FakeArray(Q, (10, 1024), "<f2", strides=(4096, 4))), ValueError, "contiguous inside each token"),
    (dict(qkv=FakeArray(Q, (10, 1024), "<f2"), dtype="bf16"), ValueError, "qkv has dtype float16, but the dtype is bfloat16"),
    (dict(qkv=FakeArray(Q, (10, 1024), "<f2"), num_tokens=9), ValueError, "num_tokens=9, but qkv has 10 tokens"),
    (dict(qkv=FakeArray(Q, (10, 1024), "<f2"), q_weight=FakeArray(W1, (64,), "<f2")), ValueError,
     "q_weight has shape (64,) and strides (1,); expected a contiguous (128,) (head_dim)"),
    (dict(qkv=FakeArray(Q, (10, 1024), "<f2"), k_weight=FakeArray(W2, (128,), "<f4")), ValueError,
     "k_weight has dtype float32, but qkv's is float16"),
    (dict(cos_sin_cache=FakeArray(C, (40, 64), "<f4"), rotary_dim=128), ValueError,
     "rotary_dim=128, but cos_sin_cache has shape (40, 64)"),
    (dict(cos_sin_cache=FakeArray(C, (40, 64), "<f2")), ValueError, "cos_sin_cache has dtype float16; cos/sin caches are float32"),
    (dict(positions=FakeArray(P, (10,), "<i4")), ValueError, "positions must be int64 (typestr '<i8'), got typestr '<i4'"),
    (dict(positions=FakeArray(P, (9,), "<i8")), ValueError, "positions has shape (9,) and strides (1,); expected a contiguous (10,)"),
    (dict(positions=[1, 2]), TypeError, "positions must be a device pointer (int), a torch tensor or an object with"),
]


@pytest.mark.parametrize("overrides, exc, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments_are_refused(fake, overrides, exc, message):
    with pytest.raises(exc) as info:
        call(**overrides)
    assert message in str(info.value)
    assert not _launches(fake)


# --- the KV cache (kv_cache): its twin, its launches and its refusals ----------------------------------------------


def strided_caches(rng, dt, num_blocks, block_size, head_dim, strides, fill):
    """Two [num_blocks, block_size, NKV, head_dim] views of ``dt`` into flat buffers (strides (block, page, head)
    in elements, head_dim contiguous), every element of the buffers ``fill`` first: (flat buffers, views)."""
    n = (num_blocks - 1) * strides[0] + (block_size - 1) * strides[1] + (NKV - 1) * strides[2] + head_dim
    flats = [np.full(n + 5, fill, dt) for _ in range(2)]
    item = np.dtype(dt).itemsize
    views = [np.lib.stride_tricks.as_strided(f, (num_blocks, block_size, NKV, head_dim),
                                             tuple(item * s for s in (*strides, 1))) for f in flats]
    return flats, views


LAYOUTS = [(4, 16, None), (3, 5, (5 * 300 + 7, 300, 130)), (2, 8, (8 * 128 * NKV + 64, 128, 8 * 128))]  # NHD, padded, HND


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
@pytest.mark.parametrize("num_blocks, block_size, strides", LAYOUTS)
def test_kv_cache_twin_is_vllms_reshape_and_cache_flash(rng, dtype, kv_cache_dtype, num_blocks, block_size, strides):
    """The twin's caches against vLLM's flat index arithmetic in float64 (kv_cache_ref) on contiguous, padded and
    HND-strided caches: each kept token's k (after the op) and v heads at its slot, exactly for 'auto' and within
    one fp8 step for fp8 (its x / scale rounded once); padding tokens (slot -1) and every other slot untouched."""
    dt = dtypes.get(dtype)
    head_dim = 128
    strides = strides or (block_size * NKV * head_dim, NKV * head_dim, head_dim)
    tokens = 9
    qkv, qw, kw, cache, positions = operands(rng, dtype, tokens, head_dim, head_dim)
    qkv[:, (NQ + NKV) * head_dim:] *= 400  # v beyond fp8's 448 * v_scale (and k normalized, past 448 * k_scale)
    out = qk_twin.qk_norm_rope_twin(qkv, qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                                    head_dim=head_dim)
    slots = rng.permutation(num_blocks * block_size)[:tokens]
    slots[[2, 5]] = -1
    element = dt.numpy if kv_cache_dtype == "auto" else dtypes.FLOAT8_E4M3FN.numpy
    _, (kc, vc) = strided_caches(rng, element, num_blocks, block_size, head_dim, strides, 7)
    scales = dict(k_scale=0.005, v_scale=0.5) if kv_cache_dtype == "fp8" else {}
    kw_args = dict(num_q_heads=NQ, num_kv_heads=NKV, head_dim=head_dim, kv_cache_dtype=kv_cache_dtype, **scales)
    got_k, got_v = qk_twin.kv_cache_twin(out, kc, vc, slots, **kw_args)
    want_k, want_v = qk_twin.kv_cache_ref(out, kc, vc, slots, **kw_args)
    for got, want, before in ((got_k, want_k, kc), (got_v, want_v, vc)):
        assert got.dtype == before.dtype and got.shape == before.shape
        g = got.astype(np.float64)
        if kv_cache_dtype == "auto":
            np.testing.assert_array_equal(g, want)
        else:  # within one step of e4m3 (3 mantissa bits) at want's magnitude; +-448 where it saturates
            step = np.exp2(np.floor(np.log2(np.maximum(np.abs(want), 2.0 ** -6))) - 3)
            assert np.all(np.abs(g - want) <= step / 2 * (1 + 1e-6))  # ties: the fp32 quotient's, float64's beside
            assert np.abs(g).max() == 448.0
        written = np.zeros(got.shape[:2], bool)
        written[slots[slots >= 0] // block_size, slots[slots >= 0] % block_size] = True
        np.testing.assert_array_equal(got[~written].view(np.uint8), before[~written].view(np.uint8))
    k0 = NQ * head_dim
    token = 3  # a kept token: its k heads are the op's output, not qkv's input
    b, o = divmod(slots[token], block_size)
    if kv_cache_dtype == "auto":
        np.testing.assert_array_equal(got_k[b, o].reshape(-1).view(np.uint8),
                                      out[token, k0:k0 + NKV * head_dim].view(np.uint8))
        assert not np.array_equal(got_k[b, o].reshape(-1), qkv[token, k0:k0 + NKV * head_dim])


def test_kv_cache_twin_fp8_is_the_divided_value_saturated():
    """fp8: float32(x) / scale, one fp32 division, rounded to nearest even; +-inf and overflow saturate to +-448,
    NaN is 0x7F whatever its sign (quant.cuh's conversion)."""
    head_dim = 8
    qkv = np.zeros((1, (1 + 2) * head_dim), F32)
    k = np.array([1.0, -3.0, 1e6, -np.inf, np.inf, np.nan, -np.nan, 0.3], F32)
    qkv[0, head_dim:2 * head_dim] = k
    qkv[0, 2 * head_dim:] = k[::-1]
    empty = np.zeros((1, 2, 1, head_dim), dtypes.FLOAT8_E4M3FN.numpy)
    got_k, got_v = qk_twin.kv_cache_twin(qkv, empty, empty, [1], num_q_heads=1, num_kv_heads=1, head_dim=head_dim,
                                         kv_cache_dtype="fp8_e4m3", k_scale=0.1, v_scale=2.0)
    with np.errstate(invalid="ignore"):
        want = np.clip(k / F32(0.1), -448, 448).astype(dtypes.FLOAT8_E4M3FN.numpy).view(np.uint8)
    want[5:7] = 0x7F
    np.testing.assert_array_equal(got_k[0, 1, 0].view(np.uint8), want)
    assert got_k[0, 0].view(np.uint8).tolist() == [[0] * head_dim]  # slot 0 not written
    assert got_v[0, 1, 0, 0] == (F32(0.3) / F32(2.0)).astype(dtypes.FLOAT8_E4M3FN.numpy)  # v's first is 0.3


def test_kv_cache_twin_refuses_a_cache_of_another_dtype():
    qkv = np.zeros((1, 3 * 8), dtypes.BFLOAT16.numpy)
    cache = np.zeros((1, 2, 1, 8), np.float16)
    with pytest.raises(ValueError, match="the caches hold float16, but kv_cache_dtype='auto' stores bfloat16"):
        qk_twin.kv_cache_twin(qkv, cache, cache, [0], num_q_heads=1, num_kv_heads=1, head_dim=8)
    with pytest.raises(ValueError, match="slot_mapping must be \\[tokens\\] = \\[1\\]"):
        qk_twin.kv_cache_twin(qkv, cache, cache, [0, 1], num_q_heads=1, num_kv_heads=1, head_dim=8)


def kv_call(**overrides):
    """call() with raw-pointer caches: 4 blocks of 16 slots, contiguous."""
    args = dict(key_cache=KC, value_cache=VC, slot_mapping=S, num_blocks=4, block_size=16)
    args.update(overrides)
    return call(**args)


def test_kv_cache_launch_arguments(qfake):
    """The v heads become rows (6 + 2 a token); the caches, slot_mapping, scales (values, or pointers with the
    value 1.0) and the layout (block_size, then the block, page and head strides) reach the kernel."""
    kv_call()
    kv_call(kv_cache_dtype="fp8", k_scale=0.5, v_scale=KS, cache_strides=(5000, 300, 130), dtype="float16")
    kv_call(k_scale=KS, v_scale=VS, kv_cache_dtype="fp8_e4m3", num_tokens=1)
    first, second, third = _launches(qfake)
    # 10 tokens x 8 heads = 80 rows, 32 a block: 3 blocks
    assert first[1] == (3, 1, 1) and first[6] == (Q, W1, W2, C, P, KC, VC, S, 0, 0, 1.0, 1.0, E6, 80, 8, 4, 2, 128,
                                                  128, 1024, 16, 16 * 2 * 128, 2 * 128, 128)
    assert second[6] == (Q, W1, W2, C, P, KC, VC, S, 0, KS, 0.5, 1.0, E6, 80, 8, 4, 2, 128, 128, 1024, 16, 5000, 300,
                         130)
    assert third[6][5:12] == (KC, VC, S, KS, VS, 1.0, 1.0) and third[6][13] == 8


def test_kv_cache_arrays_launch_what_their_pointers_launch(qfake):
    """4-D caches (torch.uint8-like 1-byte storage for fp8, padded strides), slot_mapping and a one-element scale
    through __cuda_array_interface__: the raw pointers' launch, the layout read from the arrays."""
    strides = (5 * 300 + 7, 300, 130)
    cache = lambda ptr: FakeArray(ptr, (3, 5, NKV, 128), "|u1", strides=(*strides, 1))  # noqa: E731 (1-byte: bytes)
    kv_call(key_cache=cache(KC), value_cache=cache(VC), slot_mapping=FakeArray(S, (10,), "<i8"), num_blocks=None,
            block_size=None, kv_cache_dtype="fp8", k_scale=FakeArray(KS, (1,), "<f4"), v_scale=2.0)
    kv_call(num_blocks=3, block_size=5, cache_strides=strides, kv_cache_dtype="fp8", k_scale=KS, v_scale=2.0)
    arrays, pointers = _launches(qfake)
    assert arrays[6] == pointers[6] and arrays[6][5:12] == (KC, VC, S, KS, 0, 1.0, 2.0)


def test_kv_cache_edges_reach_the_driver(qfake):
    kv_call(slot_mapping=Q + 2 * (9 * 1024 + 1024))  # right after the last token's v heads
    kv_call(key_cache=VC + 2 * (4 * 16 * 2 * 128))  # right after value_cache
    kv_call(k_scale=float(F32(2.0 ** -149)), v_scale=3.0e38, num_blocks=1, block_size=1)
    kv_call(cache_strides=[5000, 300, 130], k_scale=np.float32(0.5), kv_cache_dtype="fp8")  # a list, a numpy scale
    launches = _launches(qfake)
    assert len(launches) == 4 and launches[3][6][10] == 0.5 and launches[3][6][-3:] == (5000, 300, 130)


KV_BAD = [
    (dict(value_cache=None), ValueError, "key_cache, value_cache and slot_mapping go together; got only key_cache, "
                                         "slot_mapping"),
    (dict(num_blocks=None), TypeError, "num_blocks and block_size are required with raw-pointer caches"),
    (dict(block_size=0), ValueError, "block_size must be between 1"),
    (dict(cache_strides=(1, 2)), TypeError, "cache_strides must be (block_stride, page_stride, head_stride)"),
    (dict(cache_strides=(100, 0, 128)), ValueError, "cache_strides[1] must be between 1"),
    (dict(kv_cache_dtype="fp8_e5m2"), ValueError, "kv_cache_dtype must be one of 'auto', 'fp8', 'fp8_e4m3', got "
                                                  "'fp8_e5m2'"),
    (dict(kv_cache_dtype="fp8", k_scale=0.0), ValueError, "k_scale must be finite and > 0"),
    (dict(kv_cache_dtype="fp8", v_scale=float("nan")), ValueError, "v_scale must be finite and > 0"),
    (dict(kv_cache_dtype="fp8", k_scale="1"), TypeError, "k_scale must be a float, a device pointer (int)"),
    (dict(k_scale=KS + 2), ValueError, "k_scale pointer 0x900002 is not aligned to 4 bytes"),
    (dict(key_cache=0), ValueError, "key_cache must be a non-null device pointer, got 0"),
    (dict(value_cache=VC + 1), ValueError, "value_cache pointer 0x700001 is not aligned to 2 bytes"),
    (dict(slot_mapping=S + 4), ValueError, "slot_mapping pointer 0x800004 is not aligned to 8 bytes, as its int64"),
    (dict(slot_mapping=1.5), TypeError, "slot_mapping must be a device pointer (int), a torch tensor or an object"),
    (dict(value_cache=KC + 2 * 100), ValueError, "key_cache and value_cache overlap"),
    (dict(key_cache=Q + 2 * 9 * 1024 + 2 * 900), ValueError, "qkv and key_cache overlap"),  # the last token's v heads
    (dict(slot_mapping=VC + 8), ValueError, "value_cache and slot_mapping overlap"),
    (dict(k_scale=KC + 4), ValueError, "key_cache and k_scale overlap"),
    (dict(positions=KC), ValueError, "key_cache and positions overlap"),
    (dict(key_cache=FakeArray(KC, (4, 16, 2, 128), "<f4")), ValueError,
     "key_cache has dtype float32, but the caches hold bfloat16 (kv_cache_dtype 'auto'"),
    (dict(key_cache=FakeArray(KC, (4, 16, 3, 128), "|u1"), kv_cache_dtype="fp8"), ValueError,
     "key_cache has shape (4, 16, 3, 128) and strides (6144, 384, 128, 1); expected [num_blocks, block_size, 2, 128]"),
    (dict(key_cache=FakeArray(KC, (4, 16, 2, 128), "|u1"), value_cache=FakeArray(VC, (4, 8, 2, 128), "|u1"),
          kv_cache_dtype="fp8"), ValueError, "key_cache (shape (4, 16, 2, 128), strides (4096, 256, 128, 1)) and "
                                             "value_cache (shape (4, 8, 2, 128)"),
    (dict(key_cache=FakeArray(KC, (4, 8, 2, 128), "|u1"), kv_cache_dtype="fp8"), ValueError,
     "block_size=16, but the caches' is 8; leave block_size out"),
    (dict(slot_mapping=FakeArray(S, (10,), "<i4")), ValueError, "slot_mapping must be int64 (typestr '<i8')"),
    (dict(slot_mapping=FakeArray(S, (9,), "<i8")), ValueError, "expected a contiguous (10,) int64 (one cache slot per"),
    (dict(k_scale=FakeArray(KS, (2,), "<f4")), ValueError, "k_scale has shape (2,); expected one float32 element"),
]


@pytest.mark.parametrize("overrides, exc, message", KV_BAD, ids=[str(i) for i in range(len(KV_BAD))])
def test_bad_kv_cache_arguments_are_refused(fake, overrides, exc, message):
    with pytest.raises(exc) as info:
        kv_call(**overrides)
    assert message in str(info.value)
    assert not _launches(fake)


@pytest.mark.parametrize("name, value", [("kv_cache_dtype", "fp8"), ("k_scale", 2.0), ("v_scale", KS),
                                         ("num_blocks", 4), ("block_size", 16), ("cache_strides", (1, 1, 1))])
def test_cache_arguments_without_caches_are_refused(fake, name, value):
    with pytest.raises(ValueError, match=f"{name} applies with key_cache, value_cache and slot_mapping only"):
        call(**{name: value})
    assert not _launches(fake)

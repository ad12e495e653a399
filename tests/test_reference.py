"""The numpy references and the exact twin of rms_norm.cu (CPU only)."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import dtypes, reference
from pyrms.ops import _row_twin

from pyrms.ops import _row_plan as plan
from pyrms.crand import GlibcRand
from pyrms.demo import format_row, seed_inputs
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops.seed import twin as seed_twin

BF16 = ml_dtypes.bfloat16
DTYPES = [BF16, np.float16, np.float32]
# Relative error of the twin against float64, by dtype: two roundings to the storage dtype
# (half an ulp each: 2^-8 for bf16, 2^-11 for fp16) plus fp32 noise; fp32 storage is fp32 noise.
TOLERANCE = {np.dtype(BF16): 1.6e-2, np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6}


def test_seed_worked_example_hidden5_eps0():
    # The seed's example: token0 [1..5], token1 all 2, weight 2, eps 0.
    x = np.array([[1, 2, 3, 4, 5], [2, 2, 2, 2, 2]], dtype=np.float32)
    w = np.full(5, 2.0, dtype=np.float32)
    expected = 2 * np.array([1, 2, 3, 4, 5]) / np.sqrt(11.0)
    np.testing.assert_allclose(rms_twin.rms_norm_ref(x, w, 0.0)[0], expected, rtol=1e-15)
    twin = rms_twin.rms_norm_twin(x, w, 0.0, block=32)
    np.testing.assert_allclose(twin[0], expected, rtol=1e-6)
    assert np.array_equal(twin[1], np.full(5, 2.0, dtype=np.float32))
    np.testing.assert_allclose(np.round(twin[0].astype(np.float64), 2), [0.60, 1.21, 1.81, 2.41, 3.02])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 5, 7, 8, 9, 31, 769, 5120, 5125])
def test_twin_close_to_float64(dtype, hidden):
    rng = np.random.default_rng(hidden)
    x = rng.uniform(-3, 3, (4, hidden)).astype(dtype)
    w = rng.uniform(-1, 1, hidden).astype(dtype)
    p = rms_plan.plan_rms_norm(dtype, hidden)
    ref = rms_twin.rms_norm_ref(x, w, 1e-6)
    for phase in range(16 // np.dtype(dtype).itemsize):
        twin = rms_twin.rms_norm_twin(x, w, 1e-6, block=p.block, row_phases=phase).astype(np.float64)
        err = np.linalg.norm(twin - ref) / np.linalg.norm(ref)
        assert err < TOLERANCE[np.dtype(dtype)], (phase, err)


def test_twin_sum_order_differs_from_naive_sum_somewhere():
    # The twin must model the kernel's order, not numpy's: at least one row's fp32 sum of squares
    # differs from a plain sequential sum, or the bitwise GPU tests would prove little.
    rng = np.random.default_rng(1)
    xf = rng.uniform(-3, 3, (64, 5125)).astype(np.float32)
    twin = reference.sum_squares_twin(xf, 672, 0, 8)
    sequential = np.add.accumulate(xf * xf, axis=1, dtype=np.float32)[:, -1]
    assert np.any(twin != sequential)
    np.testing.assert_allclose(twin, (xf.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5)


def test_twin_depends_on_phase_only_through_sum_order():
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, (256, 777)).astype(np.float32)  # fp32 output shows fp32 sum differences
    w = rng.uniform(-1, 1, 777).astype(np.float32)
    outs = [rms_twin.rms_norm_twin(x, w, 1e-5, block=128, row_phases=p) for p in range(8)]
    assert any(not np.array_equal(outs[0], o) for o in outs[1:])  # order matters for some row
    for o in outs:
        np.testing.assert_allclose(o.astype(np.float32), outs[0].astype(np.float32), rtol=1e-5, atol=1e-6)


def test_twin_is_batch_invariant():
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, (50, 300)).astype(np.float16)
    w = rng.uniform(-1, 1, 300).astype(np.float16)
    full = rms_twin.rms_norm_twin(x, w, 1e-5, block=64)
    for r in (0, 17, 49):
        assert np.array_equal(rms_twin.rms_norm_twin(x[r:r + 1], w, 1e-5, block=64)[0], full[r])


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_once_and_gemma_follow_the_definitions(dtype):
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (8, 640)).astype(dtype)
    w = rng.uniform(-1, 1, 640).astype(dtype)
    ref = rms_twin.rms_norm_ref(x, w, 1e-5, gemma=True)
    once = rms_twin.rms_norm_twin(x, w, 1e-5, block=96, gemma=True, round_once=True).astype(np.float64)
    twice = rms_twin.rms_norm_twin(x, w, 1e-5, block=96, gemma=True).astype(np.float64)
    tol = TOLERANCE[np.dtype(dtype)]
    assert np.linalg.norm(once - ref) / np.linalg.norm(ref) < tol
    assert np.linalg.norm(twice - ref) / np.linalg.norm(ref) < tol
    if dtype is not np.float32:  # one rounding is at least as close as two
        assert np.abs(once - ref).sum() <= np.abs(twice - ref).sum()


def test_epsilon_zero_all_zero_row_is_nan():
    x = np.zeros((1, 16), dtype=np.float32)
    out = rms_twin.rms_norm_twin(x, np.ones(16, np.float32), 0.0, block=32)
    assert np.all(np.isnan(out))


def test_glibc_rand_matches_glibc():
    # Values printed by glibc 2.36's rand() after srand(42) and srand(1) (a C program on this machine).
    g = GlibcRand(42)
    assert [g.rand() for _ in range(5)] == [71876166, 708592740, 1483128881, 907283241, 442951012]
    g = GlibcRand(0)  # glibc treats seed 0 as 1
    assert [g.rand() for _ in range(3)] == [1804289383, 846930886, 1681692777]


def test_demo_cpu_rows_match_the_cpp_program():
    # Lines printed by the seed's C++ program (nvcc 13.0, srand(42)) for its CPU rows 0 and 4.
    x, w = seed_inputs(42, 5, 5120, "bfloat16")
    cpu = seed_twin.seed_rms_norm_cpu(x, w, 1e-5)
    assert format_row("CPU", cpu, 0).splitlines() == [
        "CPU row 0:",
        "  first 10: 0.000915527 0.208008 0.0776367 0.0405273 0.15918 0.0698242 0.482422 0.28125 0.0471191 0.0148926 ",
        "  last 10: 0.279297 -0.00170135 0.259766 0.113281 0.201172 0.0141602 0.464844 0.0473633 0.232422 0.0600586 ",
    ]
    assert format_row("CPU", cpu, 4).splitlines()[2] == (
        "  last 10: 0.152344 -0.000495911 0.0825195 0.326172 0.480469 0.0296631 0.527344 0.119141 0.232422 0.133789 ")


def _tree_by_hand(terms, fold, phase, vec_elems):
    """row_core.cuh's reduction tree, thread by thread, in scalar float32 (an independent spelling of
    what thread_sums_twin vectorizes): acc(t) = 0 + prefix[t] + P(t) + P(t + F) + ... + tail[t], each
    P(v) its vector's terms summed from 0, then the block sum's two butterflies over F threads."""
    f32 = np.float32
    split = plan.row_split(phase * (16 // vec_elems), len(terms), 16 // vec_elems)
    acc = [f32(0.0)] * fold
    for t in range(fold):
        if t < split.prefix:
            acc[t] = f32(acc[t] + terms[t])
        for v in range(t, split.vectors, fold):
            p = f32(0.0)
            for e in terms[split.prefix + v * vec_elems: split.prefix + (v + 1) * vec_elems]:
                p = f32(p + e)
            acc[t] = f32(acc[t] + p)
        if t < split.tail:
            acc[t] = f32(acc[t] + terms[split.tail_start + t])

    def butterfly(lanes):
        for offset in (16, 8, 4, 2, 1):
            lanes = [f32(lanes[i] + lanes[i ^ offset]) for i in range(32)]
        return lanes[0]

    warps = [butterfly(acc[w * 32:(w + 1) * 32]) for w in range(fold // 32)]
    return butterfly(warps + [f32(0.0)] * (32 - len(warps)))


@pytest.mark.parametrize("hidden, fold, phase, vec_elems", [(5120, 160, 0, 8), (5125, 192, 3, 8), (100, 32, 1, 4),
                                                             (4099, 1024, 2, 4)])
def test_thread_sums_twin_is_the_row_core_tree(hidden, fold, phase, vec_elems):
    rng = np.random.default_rng(hidden)
    # magnitudes over many octaves, so that any other order of the additions rounds differently
    terms = (rng.standard_normal((3, hidden)) * np.exp2(rng.integers(-12, 12, (3, hidden)))).astype(np.float32)
    got = _row_twin.thread_sums_twin(terms, fold, phase, vec_elems)
    want = [_tree_by_hand(row, fold, phase, vec_elems) for row in terms]
    assert got.view(np.uint32).tolist() == np.array(want, np.float32).view(np.uint32).tolist()


def test_row_core_tree_sums_each_vector_before_the_thread():
    """The tree is not one serial chain per thread: thread 0 holds vectors 0 and 32 (fold 32, fp32
    vectors of 4) = [1e8, 1, 1, 1] and [-1e8, 1, 1, 1]. Per-vector partials lose the ones to 1e8's
    rounding twice and cancel to 0; a serial chain would lose the first three and keep the last (3)."""
    terms = np.zeros((1, 256), np.float32)
    terms[0, 0:4] = [1e8, 1, 1, 1]
    terms[0, 128:132] = [-1e8, 1, 1, 1]
    assert _row_twin.thread_sums_twin(terms, 32, 0, 4)[0] == _tree_by_hand(terms[0], 32, 0, 4) == 0.0


@pytest.mark.parametrize("dtype, nan", [("bfloat16", 0x7FFF), ("float16", 0x7FFF), ("float32", 0x7FFFFFFF)])
def test_the_fused_adds_nan_sum_is_the_gpus_one_nan(dtype, nan):
    """A NaN operand's payload (numpy's 0x7FC00000, rounded: 0x7FC0 / 0x7E00) and inf + -inf both give
    the one NaN the GPU's fp32 add returns, as T; other sums are round_T(x + r) (a GPU run saw the payload
    differ)."""
    dt = dtypes.get(dtype).numpy
    x = np.array([[np.nan, np.inf, 1.5, -np.inf, 2.0]], dtype=dt)
    r = np.array([[1.0, -np.inf, 2.25, 1.0, np.nan]], dtype=dt)
    got = fused_twin.rounded_sum(x, r)
    word = np.uint16 if got.dtype.itemsize == 2 else np.uint32
    want = np.array([[0, 0, 3.75, -np.inf, 0]], dtype=dt).view(word)
    want[0, [0, 1, 4]] = nan
    assert got.view(word).tolist() == want.tolist()
    _, total = fused_twin.fused_add_rms_norm_twin(x, r, np.ones(5, dt), 1e-5, block=32)
    assert total.view(word).tolist() == want.tolist()

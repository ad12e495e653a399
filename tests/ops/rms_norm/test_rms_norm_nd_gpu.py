"""rms_norm on N-D views (QK-norm's slices of a fused QKV tensor, transposed views), with a weight per
outer row, and many short rows packed several to a warp: bit for bit against the twin on guarded
operands (tests.support.testing), on every misalignment that changes a row's split."""
from __future__ import annotations

import numpy as np
import pytest

from pyrms import driver, dtypes
from tests.ops.rms_norm.cases import check_rms_norm, check_rms_norm_nd
from tests.support import testing

from pyrms.ops import _row_plan as plan
from pyrms.ops.rms_norm import rms_norm
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

pytestmark = pytest.mark.gpu

DTYPES = ("bfloat16", "float16", "float32")


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(abs(hash(key)) % 2**32)


# Short rows: one of each packed width (8, 16, 32 lanes, and 32 with 2 and 4 held vectors), with tails.
SHORT = (1, 7, 32, 64, 100, 128, 130, 250, 256, 512, 1000, 1024)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", SHORT)
def test_packed_rows_plain_layout(dtype, hidden):
    """Many short rows in one stride: the packed kernel (more rows than plan.FEW_ROWS), each misalignment."""
    vec = dtypes.get(dtype).vec_elems
    for k, (in_off, out_off, w_off) in enumerate([(0, 0, 0), (1, 0, 0), (0, vec - 1, 1), (vec // 2, 1, vec - 1)]):
        check_rms_norm(_rng(dtype, hidden, k), dtype, plan.FEW_ROWS + 45, hidden, in_off=in_off,
                       out_off=out_off, w_off=w_off, in_stride=hidden + k, out_stride=hidden + 2 * k)


@pytest.mark.parametrize("weight", plan.WEIGHT_KINDS)
@pytest.mark.parametrize("in_place", (False, True))
def test_packed_rows_weights_and_in_place(weight, in_place):
    for dtype in ("bfloat16", "float16") if weight == "float32" else DTYPES:
        check_rms_norm(_rng(dtype, weight, in_place), dtype, 999, 128, in_off=3, w_off=1,
                       in_place=in_place, weight=weight)


@pytest.mark.parametrize("options", [dict(gemma=True), dict(round_once=True)])
def test_packed_rows_options(options):
    check_rms_norm(_rng(str(options)), "bfloat16", 700, 64, in_off=5, **options)


def _qkv(heads, kv_heads, head_dim):
    """(sizes' inner part, strides) of q, k and v as slices of a [tokens, (heads + 2 kv) * head_dim] tensor."""
    row = (heads + 2 * kv_heads) * head_dim
    return row, {"q": (heads, 0), "k": (kv_heads, heads * head_dim)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", (1, 5, 300))
@pytest.mark.parametrize("head_dim", (64, 128, 256))
def test_qk_norm_slices(dtype, tokens, head_dim):
    """q = qkv[:, :H*D].view(T, H, D) and k = qkv[:, H*D:(H+K)*D].view(T, K, D): row strides that do not
    collapse; out contiguous, or in place over the slice."""
    row, parts = _qkv(8, 2, head_dim)
    for name, (heads, offset) in parts.items():
        for in_place, in_off, out_off in ((False, 0, 0), (False, offset % 8, 3), (True, 0, 0), (True, 1, 0)):
            # all aligned (the ALIGNED packed kernel), then misaligned pointers
            check_rms_norm_nd(_rng(dtype, tokens, head_dim, name, in_place, in_off), dtype, (tokens, heads),
                              head_dim, in_strides=(row, head_dim), in_off=in_off, out_off=out_off,
                              in_place=in_place)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_views(dtype):
    """Gemma 3's [batch, heads, seq, head_dim] as a transposed view of [batch, seq, heads, head_dim] storage,
    and its reverse; three leading dimensions, out and input each their own strides."""
    b, s, h, d = 2, 5, 3, 128
    storage = (s * h * d, d, h * d)  # (b, h, s) strides of a [b, s, h, d] tensor
    for k, (in_s, out_s) in enumerate([(storage, None), (None, storage), (storage, storage)]):
        for off in (0, 1, 5):
            check_rms_norm_nd(_rng(dtype, k, off), dtype, (b, h, s), d, in_strides=in_s, out_strides=out_s,
                              in_off=off, out_off=(off * 3) % 8, w_off=off)


@pytest.mark.parametrize("hidden", (64, 128, 1000, 5120))
@pytest.mark.parametrize("weight", plan.WEIGHT_KINDS)
def test_nd_weights_and_hidden_sizes(hidden, weight):
    dtype = "bfloat16"
    check_rms_norm_nd(_rng(hidden, weight), dtype, (3, 4, 5), hidden,
                      in_strides=(4 * 5 * hidden + 7, 5 * hidden + 3, hidden + 1), in_off=2, w_off=3,
                      weight=weight)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", (128, 1000, 4096))
def test_weight_per_outer_row(dtype, hidden):
    """weight [L, hidden] for x [L, M, hidden], each misalignment of the weight's rows (a row stride that
    is not a multiple of the vector), bitwise equal to L calls (the twin repeats the weight rows)."""
    for w_stride in (hidden, hidden + 3):
        check_rms_norm_nd(_rng(dtype, hidden, w_stride), dtype, (3, 7), hidden, per_row=True,
                          w_stride=w_stride, w_off=1, in_off=2)
    check_rms_norm_nd(_rng(dtype, hidden, "3d"), dtype, (2, 3, 4), hidden, per_row=True, w_off=2)


def test_weight_per_outer_row_fp32_and_one_row():
    check_rms_norm_nd(_rng("fp32w"), "bfloat16", (4, 9), 256, per_row=True, weight="float32", w_off=1)
    check_rms_norm_nd(_rng("L1"), "bfloat16", (1, 9), 256, per_row=True)


def test_weight_per_outer_row_equals_separate_calls():
    """The batched weight's output for outer row i is exactly rms_norm of that slice with weight row i."""
    dt, L, M, hidden = dtypes.BFLOAT16, 3, 40, 512
    rng = np.random.default_rng(7)
    x = testing.allocate(rng, dt, L * M, hidden)
    w = testing.allocate(rng, dt, L, hidden, low=-1.0, high=1.0)
    batched = testing.allocate(rng, dt, L * M, hidden, poison=True)
    single = testing.allocate(rng, dt, L * M, hidden, poison=True)
    try:
        rms_norm(batched.ptr, x.ptr, w.ptr, 1e-6, (L, M), hidden, dtype=dt, input_stride=(M * hidden, hidden),
                 out_stride=(M * hidden, hidden), weight_stride=hidden)
        for i in range(L):
            at = i * M * hidden * dt.itemsize
            rms_norm(single.ptr + at, x.ptr + at, w.ptr + i * hidden * dt.itemsize, 1e-6, M, hidden, dtype=dt)
        driver.synchronize()
        assert np.array_equal(testing.bits(batched.download()), testing.bits(single.download()))
    finally:
        for op in (x, w, batched, single):
            op.close()


@pytest.mark.parametrize("case", ["qk", "transposed", "per_row"])
def test_arrays_collapse_their_layout(case):
    """The arrays' path: pyrms Tensor views with the layouts above, collapsed by rms_norm itself."""
    if case == "qk":
        check_rms_norm_nd(_rng(case), "bfloat16", (6, 8), 128, in_strides=(12 * 128, 128), in_off=1,
                          as_arrays=True)
    elif case == "transposed":
        check_rms_norm_nd(_rng(case), "float16", (2, 3, 5), 64, in_strides=(5 * 3 * 64, 64, 3 * 64),
                          as_arrays=True)
    else:
        check_rms_norm_nd(_rng(case), "bfloat16", (3, 2, 4), 128, per_row=True, as_arrays=True)


def test_batch_stride_above_2_31_elements():
    """Two rows 2^31 + 40 elements apart (FlashInfer issue 3005): 64-bit offsets in the N-D kernel."""
    dt, hidden = dtypes.BFLOAT16, 128
    gap = 2**31 + 40
    rng = np.random.default_rng(3005)
    rows = rng.uniform(-2, 2, (2, hidden)).astype(dt.numpy)
    w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
    with driver.DeviceBuffer((gap + hidden) * dt.itemsize) as big, driver.DeviceBuffer(w.nbytes) as wb, \
            driver.DeviceBuffer(2 * hidden * dt.itemsize) as out:
        driver.memcpy_htod(big.ptr, rows[0])
        driver.memcpy_htod(big.ptr + gap * dt.itemsize, rows[1])
        driver.memcpy_htod(wb.ptr, w)
        rms_norm(out.ptr, big.ptr, wb.ptr, 1e-6, (2, 1), hidden, dtype=dt, input_stride=(gap, hidden),
                 out_stride=(hidden, hidden))
        got = np.empty((2, hidden), dt.numpy)
        driver.memcpy_dtoh(got, out.ptr)
    p = rms_plan.plan_rms_norm(dt, hidden)

    want = rms_twin.rms_norm_twin(rows, w, 1e-6, block=p.block)
    assert np.array_equal(testing.bits(got), testing.bits(want))


def test_out_rows_that_overlap_are_refused():
    dt = dtypes.BFLOAT16
    with driver.DeviceBuffer(1 << 20) as buf:
        with pytest.raises(ValueError, match="overlap"):
            rms_norm(buf.ptr, buf.ptr + 4096, buf.ptr + 8192, 1e-6, (4, 8), 128, dtype=dt,
                     input_stride=(1024, 128), out_stride=(1024, 64))

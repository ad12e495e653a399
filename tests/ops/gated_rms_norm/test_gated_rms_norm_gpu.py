"""pyrms.gated_rms_norm on the GPU: bitwise equality with the twin (gated_rms_norm_twin) over every element phase of
x, misaligned z, out and weights, strided rows, both orders, group sizes (one group, groups of whole vectors, of
vectors and a tail, short groups straddling vectors, Mamba2's 8 x 1024), every weight kind, NaN/inf and saturating
gates, bf16, fp16 and fp32, the few-row and many-row kernels, 1 to 1000 rows and rows up to 65537 elements; out's
guards and gaps and every input checked untouched (tests.support.testing's guarded operands and run_checked). Also:
the gate-first rows by a saturated power of two are pyrms.rms_norm's round-once rows (the family's tree), a row's
result does not depend on the batch, and arrays (pyrms Tensors, torch) launch what pointers do."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_twin
from tests.ops.gated_rms_norm.cases import check_gated_rms_norm
from tests.support import case_matrix
from tests.support.testing import allocate, check_case, closing

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_case_matrix(rng, dtype):
    """The sanitizer sweep's cases (tests.support.case_matrix): x at every phase, z and out misaligned, each weight
    kind, both orders, every group shape, strided rows with specials, the few-row and many-row kernels."""
    cases = [c for c in case_matrix.sanitize("gated_rms_norm") if c.dtype == dtype]
    assert cases
    for c in cases:
        check_case(rng, c)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("hidden, group_size", [(8192, 1024), (4096, None), (2048, 256), (1536, 96)])
def test_row_counts(rng, dtype, norm_before_gate, hidden, group_size):
    """1 to 1000 rows: the few-row kernel (aligned: the ALIGNED one) up to 256 (row, group) blocks and the many-row
    one past them; then misaligned x and z. (Rows are independent blocks: more rows add no new path, only twin time.)"""
    for rows in (1, 2, 31, 32, 33, 256, 257, 1000):
        check_gated_rms_norm(rng, dtype, rows, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                             epsilon=1e-6)
    check_gated_rms_norm(rng, dtype, 1000, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                         offsets={"x": 1, "z": 3})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("weight", ["same", "float32", "none"])
@pytest.mark.parametrize("variant", ["few", "many"])
def test_weights_strides_and_variants(rng, dtype, norm_before_gate, weight, variant):
    """Every weight kind, each row operand its own stride off the vector and its own phase, both kernels, one
    group and several."""
    if weight == "float32" and dtype == "float32":
        pytest.skip("an fp32 weight beside fp32 rows is the rows' own dtype")
    for hidden, group_size in ((5125, None), (264, 88), (4096, 512)):
        check_gated_rms_norm(rng, dtype, 19, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                             weight=weight, variant=variant, offsets={"x": 1, "z": 2, "out": 3, "weight": 1},
                             strides={"x": hidden + 3, "z": hidden + 7, "out": hidden + 1})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 9, 16384, 65537])
def test_row_lengths(rng, dtype, hidden):
    """Prefix-only, a prefix and a tail, the cached rows' longest and a row re-read in pass 2 (65537: the
    1024-thread shape), both orders, with specials."""
    for norm_before_gate in (True, False):
        check_gated_rms_norm(rng, dtype, 5, hidden, norm_before_gate=norm_before_gate, offsets={"x": 1},
                             specials=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", [None, 256])
def test_gate_first_by_a_saturated_power_of_two_is_rms_norms_row(rng, dtype, group_size):
    """The gate first with z = 32 (silu(32) = 32 exactly in fp32) and epsilon 0 is pyrms.rms_norm's round-once row
    of x (of each group), bit for bit: the gated values' sum of squares in the RMSNorm row's tree."""
    dt = dtypes.get(dtype)
    rows, hidden = 37, 1024
    gs = group_size or hidden
    x = allocate(rng, dt, rows, hidden, misalign=1)
    z = allocate(rng, dt, rows, hidden)
    z.set_values(np.full((rows, hidden), 32.0, dt.numpy))
    z.upload()
    w = allocate(rng, dt, 1, hidden, low=0.5, high=1.5)
    out = allocate(rng, dt, rows, hidden, poison=True)
    ref = allocate(rng, dt, rows, hidden, poison=True)
    with closing(x, z, w, out, ref):
        pyrms.gated_rms_norm(x.ptr, z.ptr, w.ptr, 0.0, out=out.ptr, group_size=group_size, norm_before_gate=False,
                             num_tokens=rows, hidden_size=hidden, dtype=dt)
        for g in range(hidden // gs):
            at = g * gs * dt.itemsize
            pyrms.rms_norm(ref.ptr + at, x.ptr + at, w.ptr + at, 0.0, rows, gs, dtype=dt, input_stride=hidden,
                           out_stride=hidden, round_once=True)
        driver.synchronize()
        np.testing.assert_array_equal(out.device_values().view(np.uint8), ref.device_values().view(np.uint8))


def test_a_rows_result_does_not_depend_on_the_batch(rng):
    """Row 123 alone and inside 300 rows (the many-row kernel against the few-row one): the same bits."""
    dt, hidden = dtypes.BFLOAT16, 8192
    many_x, many_z = allocate(rng, dt, 300, hidden), allocate(rng, dt, 300, hidden)
    one_x, one_z = allocate(rng, dt, 1, hidden), allocate(rng, dt, 1, hidden)
    one_x.set_values(many_x.values()[123:124])
    one_z.set_values(many_z.values()[123:124])
    one_x.upload()
    one_z.upload()
    w = allocate(rng, dt, 1, hidden)
    many_out, one_out = allocate(rng, dt, 300, hidden, poison=True), allocate(rng, dt, 1, hidden, poison=True)
    with closing(many_x, many_z, one_x, one_z, w, many_out, one_out):
        for norm_before_gate in (True, False):
            for x, z, out, n in ((many_x, many_z, many_out, 300), (one_x, one_z, one_out, 1)):
                pyrms.gated_rms_norm(x.ptr, z.ptr, w.ptr, 1e-5, out=out.ptr, group_size=1024,
                                     norm_before_gate=norm_before_gate, num_tokens=n, hidden_size=hidden)
            driver.synchronize()
            np.testing.assert_array_equal(many_out.device_values()[123].view(np.uint16),
                                          one_out.device_values()[0].view(np.uint16))


def test_pyrms_tensors_allocate_the_output(rng):
    """x and z as pyrms Tensors (x a strided view), the weight as one, out allocated: the twin's bits."""
    dt, rows, hidden = dtypes.FLOAT16, 9, 320
    x = allocate(rng, dt, rows, hidden, stride=hidden + 8)
    z = allocate(rng, dt, rows, hidden)
    w = allocate(rng, dtypes.FLOAT32, 1, hidden)
    want = gated_rms_norm_twin(x.values(), z.values(), w.values()[0], 1e-6, group_size=64, norm_before_gate=False)
    with closing(x, z, w):
        out = pyrms.gated_rms_norm(pyrms.Tensor(x.ptr, (rows, hidden), dt, (hidden + 8, 1), 0),
                                   pyrms.Tensor(z.ptr, (rows, hidden), dt), pyrms.Tensor(w.ptr, (hidden,),
                                                                                        dtypes.FLOAT32),
                                   group_size=64, norm_before_gate=False)
        driver.synchronize()
        assert isinstance(out, pyrms.Tensor) and out.shape == (rows, hidden)
        got = np.empty((rows, hidden), dt.numpy)
        driver.memcpy_dtoh(got, out.ptr)
        out.close()
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_torch_tensors():
    """3-D torch tensors (a strided x), an fp32 weight, out given: the twin's bits."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 2048 + 16, generator=gen).to(torch.bfloat16).cuda()[..., :2048]
    z = (4 * torch.randn(4, 5, 2048, generator=gen)).to(torch.bfloat16).cuda()
    w = (torch.rand(2048, generator=gen) + 0.5).cuda()
    out = torch.empty(4, 5, 2048, dtype=torch.bfloat16, device="cuda")

    def bf16(t):
        return t.cpu().contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16).reshape(-1, 2048)

    want = gated_rms_norm_twin(bf16(x), bf16(z), w.cpu().numpy(), 1e-5, group_size=256)
    pyrms.gated_rms_norm(x, z, w, 1e-5, out=out, group_size=256, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bf16(out).view(np.uint16), want.view(np.uint16))

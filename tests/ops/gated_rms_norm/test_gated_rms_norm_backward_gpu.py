"""pyrms.gated_rms_norm_backward on the GPU: dx, dz and dweight bitwise the twin's (gated_rms_norm_backward_twin)
over both orders, group shapes (one group, whole vectors, vectors and a tail, short groups straddling vectors,
Mamba2's 8 x 1024), every weight kind, x, z, dy, the gradients and the weight at their own phases and strides,
NaN/inf and saturating gates, bf16, fp16 and fp32, one row per block and a chunk per block; every guard, gap and
input untouched. Also: a row's gradients do not depend on how the batch is launched, a caller's workspace, arrays
(pyrms Tensors) with the gradients allocated, and its benchmark (`--ops gated_backward`) validating."""
import json

import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.bench import cli
from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_backward_twin
from tests.ops.gated_rms_norm.cases import check_gated_backward
from tests.support import case_matrix
from tests.support.testing import allocate, check_case, closing

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_case_matrix(rng, dtype):
    """The sanitizer sweep's cases (tests.support.case_matrix): x at every phase, the other rows and the weight
    misaligned, each weight kind, both orders, every group shape, strided rows with specials, 1 to 9000 rows."""
    cases = [c for c in case_matrix.sanitize("gated_rms_norm_backward") if c.dtype == dtype]
    assert cases
    for c in cases:
        check_case(rng, c)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("hidden, group_size", [(7, None), (64, None), (769, None), (5125, None), (256, 64),
                                                (264, 88), (8192, 1024), (60, 12)])
def test_group_shapes_at_every_phase(rng, dtype, norm_before_gate, hidden, group_size):
    """Every group shape with x at three phases (aligned, 1, the vector's last element), the others misaligned
    differently, specials in the misaligned case."""
    n = dtypes.get(dtype).vec_elems
    for k, phase in enumerate((0, 1, n - 1)):
        offsets = {} if phase == 0 else {"x": phase, "z": (phase + 1) % n, "grad_output": (phase + 2) % n,
                                         "grad_x": (phase + 3) % n, "grad_z": 1, "weight": 1}
        check_gated_backward(rng, dtype, 5, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                             offsets=offsets, specials=k == 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("weight", ["same", "float32", "none"])
def test_weights_strides_and_workspaces(rng, dtype, norm_before_gate, weight):
    """Every weight kind, each row operand its own stride off the vector and its own phase, the weight and its
    gradient misaligned, a caller's workspace and the pooled one."""
    if weight == "float32" and dtype == "float32":
        pytest.skip("an fp32 weight beside fp32 rows is the rows' own dtype")
    for hidden, group_size in ((5125, None), (264, 88), (4096, 512)):
        check_gated_backward(rng, dtype, 19, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                             weight=weight, workspace=hidden == 264,
                             offsets={"x": 1, "z": 2, "grad_output": 3, "grad_x": 2, "grad_z": 1, "weight": 1,
                                      "grad_weight": 3},
                             strides={"x": hidden + 3, "z": hidden + 7, "grad_output": hidden + 1,
                                      "grad_x": hidden + 5, "grad_z": hidden + 2})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("hidden, group_size, counts", [
    (8192, 1024, (1, 2, 33, 512, 513, 1500)),  # 8 groups: a chunk per block past 512 rows (chunks of 4)
    (1024, None, (4096, 4097)),  # one group: past 4096 rows (chunks of 8)
    (256, 64, (8200,)),  # chunks of 16
])
def test_row_counts(rng, dtype, norm_before_gate, hidden, group_size, counts):
    """One row per block up to 4096 (row, group) blocks, a chunk per block past them, chunks of 4, 8 and 16 rows by
    the row count; a misaligned x and z at the largest."""
    for rows in counts:
        check_gated_backward(rng, dtype, rows, hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                             weight="float32", epsilon=1e-6)
    check_gated_backward(rng, dtype, counts[-1], hidden, group_size=group_size, norm_before_gate=norm_before_gate,
                         offsets={"x": 1, "z": 3})


def test_a_rows_gradients_do_not_depend_on_the_batch(rng):
    """Row 123 alone and inside 3000 rows of 8 groups (one row per block against a chunk per block): the same dx
    and dz bits, both orders."""
    dt, hidden = dtypes.BFLOAT16, 2048
    x, z, dy = (allocate(rng, dt, 3000, hidden) for _ in range(3))  # 3000 x 8 groups: a chunk per block
    one = [allocate(rng, dt, 1, hidden) for _ in range(3)]
    for big, small in zip((x, z, dy), one):
        small.set_values(big.values()[123:124])
        small.upload()
    w = allocate(rng, dtypes.FLOAT32, 1, hidden)
    outs = [allocate(rng, dt, n, hidden, poison=True) for n in (3000, 3000, 1, 1)]
    gws = [allocate(rng, dtypes.FLOAT32, 1, hidden, poison=True) for _ in range(2)]
    with closing(x, z, dy, *one, w, *outs, *gws):
        for norm_before_gate in (True, False):
            for (xx, zz, dd), (gx, gz), gw, n in (((x, z, dy), outs[:2], gws[0], 3000),
                                                  (one, outs[2:], gws[1], 1)):
                pyrms.gated_rms_norm_backward(gx.ptr, gz.ptr, gw.ptr, dd.ptr, xx.ptr, zz.ptr, w.ptr, 1e-5,
                                              group_size=256, norm_before_gate=norm_before_gate, num_tokens=n,
                                              hidden_size=hidden, weight_dtype="float32")
            driver.synchronize()
            for many, single in ((outs[0], outs[2]), (outs[1], outs[3])):
                np.testing.assert_array_equal(many.device_values()[123].view(np.uint16),
                                              single.device_values()[0].view(np.uint16))


def test_pyrms_tensors_allocate_the_gradients(rng):
    """x, z and dy as pyrms Tensors (x a strided view), an fp32 weight, every gradient allocated: the twin's bits;
    an empty batch returns a zero grad_weight."""
    dt, rows, hidden = dtypes.FLOAT16, 9, 320
    x = allocate(rng, dt, rows, hidden, stride=hidden + 8)
    z = allocate(rng, dt, rows, hidden)
    dy = allocate(rng, dt, rows, hidden)
    w = allocate(rng, dtypes.FLOAT32, 1, hidden)
    want = gated_rms_norm_backward_twin(dy.values(), x.values(), z.values(), w.values()[0], 1e-6, group_size=64,
                                        norm_before_gate=False)
    with closing(x, z, dy, w):
        tensors = [pyrms.Tensor(x.ptr, (rows, hidden), dt, (hidden + 8, 1), 0), pyrms.Tensor(z.ptr, (rows, hidden), dt),
                   pyrms.Tensor(w.ptr, (hidden,), dtypes.FLOAT32)]
        got = pyrms.gated_rms_norm_backward(None, None, None, pyrms.Tensor(dy.ptr, (rows, hidden), dt), tensors[0],
                                            tensors[1], tensors[2], 1e-6, group_size=64, norm_before_gate=False)
        driver.synchronize()
        assert [g.shape for g in got] == [(rows, hidden), (rows, hidden), (hidden,)]
        for g, v in zip(got, want):
            np.testing.assert_array_equal(g.to_numpy().view(np.uint8), np.asarray(v).view(np.uint8))
            g.close()
        empty = [pyrms.Tensor(t.ptr, (0, hidden), dt) for t in (dy, x, z)]
        _, _, zero = pyrms.gated_rms_norm_backward(None, None, None, *empty, tensors[2], 1e-6)
        assert not zero.to_numpy().any()

def test_the_gated_backward_validates_and_times(tmp_path, capsys):
    """--ops gated_backward: pyrms's dx, dz and dγ and the eager formula's through autograd, validated against the
    float64 reference (dγ over every row) and timed at a one-row-per-block and a chunk-per-block shape."""
    pytest.importorskip("torch")
    status = cli.main(["--shapes", "5x1024,600x8192", "--ops", "gated_backward", "--impls", "pyrms,torch",
                       "--rounds", "1", "--reps", "3", "--copy-mib", "256", "--no-host", "--no-graphs", "--no-floor",
                       "--no-after-gemm", "--no-plot", "--out", str(tmp_path), "--name", "gated_backward"])
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads((tmp_path / "gated_backward.json").read_text())
    timed = [r for r in data["results"] if r["status"] == "ok"]
    assert {(r["impl"], r["tokens"]) for r in timed} == {(impl, tokens) for impl in ("pyrms", "pyrms_nopdl", "torch")
                                                         for tokens in (5, 600)}
    for r in timed:
        assert set(r["validation_rel_error"]) == {"dx", "dz", "dw"}
        assert max(r["validation_rel_error"].values()) < 1e-2 and r["median_us"] > 0, r

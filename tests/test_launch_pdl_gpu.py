"""Programmatic dependent launch (pdl=True) on the GPU: the same bits as without it, and a kernel that
may start before its producer has finished still reads what the producer wrote (griddepcontrol.wait),
on a stream and inside a CUDA graph.

The dependency tests make the producer slow on purpose (a large batch), poison the buffer it writes,
and launch the consumer right behind it with pdl=True: a consumer that did not wait would read poison.
"""
import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms import driver
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.ops.rms_norm.cases import check_rms_norm
from tests.support.testing import bits, check_norm_backward
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

pytestmark = pytest.mark.gpu

BF16 = ml_dtypes.bfloat16
CHECKS = {"rms_norm": check_rms_norm, "fused_add": check_fused_add_rms_norm, "layer_norm": check_layer_norm}


@pytest.mark.parametrize("pdl", [False, True])  # the default is True (on this sm_90 GPU)
@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("hidden", [7, 4096, 5125, 16384])
def test_pdl_gives_the_same_bits(rng, op, hidden, variant, pdl):
    CHECKS[op](rng, "bfloat16", 5, hidden, variant=variant, pdl=pdl)


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_pdl_backward_gives_the_same_bits(rng, layer_norm, pdl):
    for rows in (3, 300):
        check_norm_backward(rng, "bfloat16", rows, 5120, layer_norm=layer_norm, pdl=pdl)


def test_launches_use_pdl_by_default_where_the_gpu_has_it():
    from pyrms.ops._prepared import use_pdl

    device = driver.selected_device()
    assert use_pdl(device, True) == (device.compute_capability >= (9, 0)) and not use_pdl(device, False)


def _chain(stream, x, w, outs, rows, hidden, pdl):
    """outs[0] = rms_norm(x) over `rows` rows (slow: the producer), then outs[k] = rms_norm(outs[k-1])
    over its first row only (fast consumers launched right behind, each reading its producer's output)."""
    pyrms.rms_norm(outs[0].ptr, x.ptr, w.ptr, 1e-6, rows, hidden, stream=stream, pdl=pdl)
    for k in range(1, len(outs)):
        pyrms.rms_norm(outs[k].ptr, outs[k - 1].ptr, w.ptr, 1e-6, 1, hidden, stream=stream, pdl=pdl)


def _chain_twin(x, w, links, hidden):
    block = rms_plan.plan_rms_norm("bfloat16", hidden).block
    want = [rms_twin.rms_norm_twin(x, w, 1e-6, block=block)]
    for _ in range(1, links):
        want.append(rms_twin.rms_norm_twin(want[-1][:1], w, 1e-6, block=block))
    return want


@pytest.mark.parametrize("graph", [False, True])
def test_a_dependent_launch_waits_for_its_producer(rng, graph):
    rows, hidden, links = 16384, 5120, 6
    x = rng.uniform(-2, 2, (rows, hidden)).astype(BF16)
    w = rng.uniform(-1, 1, hidden).astype(BF16)
    want = _chain_twin(x, w, links, hidden)
    with driver.Stream() as stream, pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw:
        outs = [pyrms.Tensor.empty((rows, hidden), "bfloat16") for _ in range(links)]
        try:
            for attempt in range(3):  # the same result every time, not by luck of timing
                for o in outs:
                    o.fill_bytes(0xFF)  # NaN poison: a consumer that ran early reads it
                driver.synchronize()
                if graph:
                    with driver.capture(stream) as g:
                        _chain(stream, dx, dw, outs, rows, hidden, pdl=True)
                    g.launch(stream)
                    stream.synchronize()
                    g.close()
                else:
                    _chain(stream, dx, dw, outs, rows, hidden, pdl=True)
                    stream.synchronize()
                got = [o.to_numpy() for o in outs]
                assert np.array_equal(bits(got[0]), bits(want[0]))
                for k in range(1, links):
                    assert np.array_equal(bits(got[k][:1]), bits(want[k])), (attempt, k)
        finally:
            for o in outs:
                o.close()


def test_fused_add_chain_with_pdl_reads_the_updated_residual(rng):
    """Two fused adds in place on the same residual, back to back with pdl: the second must see the
    residual (and input) the first wrote."""
    rows, hidden = 8192, 4096
    x1, x2, r = (rng.uniform(-2, 2, (rows, hidden)).astype(BF16) for _ in range(3))
    w = rng.uniform(-1, 1, hidden).astype(BF16)
    block = fused_plan.plan_fused_add_rms_norm("bfloat16", hidden).block
    want1, total1 = fused_twin.fused_add_rms_norm_twin(x1, r, w, 1e-6, block=block)
    want2, total2 = fused_twin.fused_add_rms_norm_twin(x2, total1, w, 1e-6, block=block)
    with driver.Stream() as stream, pyrms.Tensor.from_numpy(x1) as d1, pyrms.Tensor.from_numpy(x2) as d2, \
            pyrms.Tensor.from_numpy(r) as dr, pyrms.Tensor.from_numpy(w) as dw:
        for rows_now, dx in ((rows, d1), (3, d2)):  # a slow producer, then a fast consumer of 3 rows
            pyrms.fused_add_rms_norm(dx.ptr, dr.ptr, dw.ptr, 1e-6, rows_now, hidden, stream=stream, pdl=True)
        stream.synchronize()
        assert np.array_equal(bits(d1.to_numpy()), bits(want1))
        assert np.array_equal(bits(d2.to_numpy()[:3]), bits(want2[:3]))
        assert np.array_equal(bits(dr.to_numpy()[:3]), bits(total2[:3]))
        assert np.array_equal(bits(dr.to_numpy()[3:]), bits(total1[3:]))


def test_pdl_must_be_a_bool():
    with pytest.raises(TypeError, match="pdl must be True or False, got 'yes'"):
        pyrms.rms_norm(1 << 20, 1 << 21, 1 << 22, 1e-6, 1, 64, pdl="yes")
    with pytest.raises(TypeError, match="pdl must be True or False, got 2"):
        pyrms.layer_norm(1 << 20, 1 << 21, 1 << 22, None, 1e-6, 1, 64, pdl=2)


def test_few_and_many_row_kernels_agree_with_pdl(rng):
    """The latency shape (spread threads, weights early) and the many-row shape give the same bits,
    with and without pdl, at the decode sizes."""
    for hidden in (4096, 5120, 8192, 16384):
        for pdl in (False, True):
            for variant in ("few", "many"):
                check_rms_norm(rng, "bfloat16", 2, hidden, variant=variant, pdl=pdl, in_off=0, out_off=0)
                check_fused_add_rms_norm(rng, "bfloat16", 2, hidden, variant=variant, pdl=pdl)

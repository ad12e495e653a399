"""Two GPUs in one process: every op on device 1 alone, and on devices 0 and 1 from two
threads at once (each thread on its own device and its own streams), each launch compared bit for bit
with the numpy twin over the whole guarded allocation by tests.support.testing's checkers (the seed kernel,
which has no twin, against float64 and bitwise across the devices); a pointer, a workspace or a stream
of the other device refused before any launch. Skipped, with the reason, where fewer than two GPUs
exist; tests/ops/test_multi_device.py checks the same bookkeeping on the CPU."""
import threading

import numpy as np
import pytest

import pyrms
from pyrms import driver
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.ops.rms_norm.cases import check_rms_norm
from tests.support import testing
from pyrms.ops.rms_norm import twin as rms_twin


def _fewer_than_two_gpus() -> str | None:
    try:
        count = driver.device_count()
    except pyrms.NoDriverError as exc:
        return f"no CUDA driver: {exc}"
    return None if count >= 2 else f"needs two GPUs; this machine has {count}"


_WHY_NOT = _fewer_than_two_gpus()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_WHY_NOT is not None, reason=_WHY_NOT or "")]


def seed_on_this_device(rng, stream):
    """The seed kernel (no twin: it uses rsqrtf) against float64, its guards untouched; returns its bits."""
    x = testing.allocate(rng, "bfloat16", 5, 5120, low=0.2, high=1.0)
    w = testing.allocate(rng, "bfloat16", 1, 5120, low=-0.02, high=0.5)
    out = testing.allocate(rng, "bfloat16", 5, 5120, poison=True)
    try:
        pyrms.seed_rms_norm(out.ptr, x.ptr, w.ptr, 1e-5, 5, 5120, stream=stream)
        driver.synchronize()
        whole = out.download()
        rows = whole[out.offset:out.offset + 5 * 5120]
        assert np.abs(rows.reshape(5, 5120).astype(np.float64) - rms_twin.rms_norm_ref(x.values(), w.values()[0], 1e-5)
                      ).max() < 4e-3
        guards = np.ones(whole.size, bool)
        guards[out.offset:out.offset + 5 * 5120] = False
        assert (testing.bits(whole[guards]) == 0xFFFF).all()
        return testing.bits(rows).copy()
    finally:
        for o in (x, w, out):
            o.close()


# Every op, at an odd hidden size, misaligned pointers and strided rows (stream: the thread's own).
CASES = {
    "rms_norm": lambda rng, s: check_rms_norm(rng, "bfloat16", 5, 5125, in_off=1, w_off=3, out_off=5,
                                              in_stride=5131, stream=s),
    "rms_norm many rows": lambda rng, s: check_rms_norm(rng, "float16", 300, 4096, in_off=2, gemma=True,
                                                        stream=s),  # more than plan.FEW_ROWS: the many-row kernel
    "rms_norm float32 round once": lambda rng, s: check_rms_norm(rng, "float32", 3, 769, round_once=True,
                                                                 in_place=True, stream=s),
    "fused_add_rms_norm": lambda rng, s: check_fused_add_rms_norm(
        rng, "bfloat16", 7, 5125, offsets={"input": 1, "residual": 2, "weight": 3}, strides={"residual": 5131},
        stream=s),
    "layer_norm": lambda rng, s: check_layer_norm(rng, "bfloat16", 9, 769, offsets={"input": 3, "out": 1},
                                                  stream=s),
    "layer_norm without bias": lambda rng, s: check_layer_norm(rng, "float16", 4, 5125, bias=False, stream=s),
    "rms_norm_backward": lambda rng, s: testing.check_norm_backward(rng, "bfloat16", 33, 769,
                                                                    offsets={"input": 1, "grad_output": 2}, stream=s),
    "rms_norm_backward own workspace, fp32 grads": lambda rng, s: testing.check_norm_backward(
        rng, "bfloat16", 40, 5125, grad_dtype="float32", own_workspace=True, rows_per_block=16, stream=s),
    "layer_norm_backward": lambda rng, s: testing.check_norm_backward(rng, "float16", 17, 5125, layer_norm=True,
                                                                      offsets={"weight": 1}, stream=s),
    "seed": lambda rng, s: seed_on_this_device(rng, s),
}


@pytest.fixture
def on_device_1():
    """The calling thread on device 1 inside the test, back on device 0 after it."""
    driver.set_device(1)
    yield driver.get_device(1)
    driver.set_device(0)


@pytest.mark.parametrize("name", list(CASES))
def test_every_op_on_device_1(rng, on_device_1, name):
    with pyrms.Stream() as stream:
        assert stream.device is on_device_1
        for s in (None, stream, stream.handle):
            CASES[name](rng, s)


def test_two_threads_on_devices_0_and_1_at_once(rng):
    rounds, failures, seed_bits = 3, [], {}
    start = threading.Barrier(2)

    def worker(ordinal):
        try:
            driver.set_device(ordinal)
            thread_rng = np.random.default_rng(1000 + ordinal)  # numpy generators are not shared between threads
            with pyrms.Stream() as first, pyrms.Stream(non_blocking=True) as second:
                start.wait()
                for r in range(rounds):
                    for name, case in CASES.items():
                        stream = (first, second.handle)[r % 2]
                        bits = case(np.random.default_rng(2026 + r) if name == "seed" else thread_rng, stream)
                        if name == "seed":
                            seed_bits[(ordinal, r)] = bits
            pyrms.release_workspaces()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append((ordinal, exc))

    threads = [threading.Thread(target=worker, args=(ordinal,)) for ordinal in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for r in range(rounds):  # one cubin, loaded into each device: the same inputs give the same bits
        assert np.array_equal(seed_bits[(0, r)], seed_bits[(1, r)])


def test_memory_and_streams_of_the_other_device_are_refused_before_any_launch(rng, on_device_1):
    with pyrms.DeviceBuffer(4096, 0) as theirs, pyrms.DeviceBuffer(4096, 1) as mine, \
            pyrms.Stream(device=0) as their_stream:
        pyrms.rms_norm(mine.ptr, mine.ptr, mine.ptr + 2048, 1e-5, 1, 256, dtype="float32")  # accepted first
        with pytest.raises(ValueError, match=f"^input pointer {theirs.ptr:#x} is on device 0, but the launch runs on "
                                             "device 1"):
            pyrms.rms_norm(mine.ptr, theirs.ptr, mine.ptr + 2048, 1e-5, 1, 256, dtype="float32")
        with pytest.raises(ValueError, match=f"^stream {their_stream.handle:#x} belongs to device 0, but the launch "
                                             "runs on device 1"):
            pyrms.rms_norm(mine.ptr, mine.ptr, mine.ptr + 2048, 1e-5, 1, 256, dtype="float32",
                           stream=their_stream.handle)
        with pytest.raises(ValueError, match="^workspace pointer .* is on device 0, but the launch runs on device 1"):
            pyrms.rms_norm_backward(mine.ptr, mine.ptr + 1024, mine.ptr + 2048, mine.ptr + 3072, mine.ptr + 3584,
                                    1e-5, 1, 64, dtype="float32", workspace=theirs)
        driver.synchronize()  # nothing faulted: the device is still usable

"""Two devices in one process, on the CPU over fake_driver.FakeDriver(device_count=2): every op refuses a
pointer, an array, a parameter gradient, a workspace or a stream of another device than the launch's
before any launch; the prepared launch's per-call check asks the driver nothing; one NVRTC run serves
both devices of one arch, its cubin loaded once into each device's context; prepared launches,
kernels and workspace pools are per device; two threads on two devices keep to their own."""
import gc
import importlib
import threading

import pytest
import pyrms
from tests.support.fake_driver import FakeDriver, fresh_driver_state, run_threads_switching_often
from pyrms import compiler, driver, launch
from pyrms.ops import _placement, _workspace
from pyrms.tensor import Tensor

ROWS, HIDDEN = 4, 64
ROW_BYTES, VECTOR_BYTES = ROWS * HIDDEN * 4, HIDDEN * 4
CONTEXT = {0: 0xC000, 1: 0xC001}  # the fake's primary contexts
rms_norm_module = importlib.import_module("pyrms.ops.rms_norm.op")


def machine(monkeypatch, count: int):
    """A fake machine of `count` sm_90 devices, each op's kernels bound to the device asked for (the
    fake runs no kernel; the launches are logged with the context current at the time)."""
    fake = FakeDriver(device_count=count, free_bytes=64 << 20, total_bytes=80 << 20)
    fresh_driver_state(monkeypatch.setattr, fake)
    fake.asked_for = []

    def get(source, expression, group, signature, device=None):
        fake.asked_for.append((source, expression, device.ordinal))
        return launch.Kernel(0xF00D, expression, signature, device)

    monkeypatch.setattr(launch, "get_kernel", get)
    return fake


@pytest.fixture
def two(monkeypatch):
    yield machine(monkeypatch, 2)
    gc.collect()  # buffers left open are freed while the fake is still in place


@pytest.fixture
def one(monkeypatch):
    yield machine(monkeypatch, 1)
    gc.collect()


def launches(fake):
    """(stream, context) of every launch the fake logged."""
    return [(args[4], args[5]) for name, args in fake.calls if name.startswith("cuLaunchKernel")]


def queries(fake):
    return [name for name, _ in fake.calls if name in ("cuPointerGetAttribute", "cuStreamGetDevice")]


class Operands:
    """float32 operands of every op by argument name, each a DeviceBuffer of the device given (or of
    `device` for those not named in `elsewhere`)."""

    ROW_NAMES = ("out", "input", "residual", "grad_input", "grad_output")
    VECTOR_NAMES = ("weight", "bias", "grad_weight", "grad_bias")

    def __init__(self, device: int, elsewhere=()):
        self.buffers = {name: driver.DeviceBuffer(ROW_BYTES if name in self.ROW_NAMES else VECTOR_BYTES,
                                                  1 - device if name in elsewhere else device)
                        for name in (*self.ROW_NAMES, *self.VECTOR_NAMES)}

    def __getitem__(self, name) -> int:
        return self.buffers[name].ptr

    def close(self):
        for buffer in self.buffers.values():
            buffer.close()


# Every op with the pointer arguments it takes, called on raw pointers; `extra` takes keywords such
# as stream= and workspace=.
def call_rms_norm(p, **extra):
    pyrms.rms_norm(p["out"], p["input"], p["weight"], 1e-5, ROWS, HIDDEN, dtype="float32", **extra)


def call_fused(p, **extra):
    pyrms.fused_add_rms_norm(p["input"], p["residual"], p["weight"], 1e-5, ROWS, HIDDEN, dtype="float32", **extra)


def call_layer_norm(p, **extra):
    pyrms.layer_norm(p["out"], p["input"], p["weight"], p["bias"], 1e-5, ROWS, HIDDEN, dtype="float32", **extra)


def call_rms_backward(p, **extra):
    pyrms.rms_norm_backward(p["grad_input"], p["grad_weight"], p["grad_output"], p["input"], p["weight"], 1e-5, ROWS,
                            HIDDEN, dtype="float32", **extra)


def call_ln_backward(p, **extra):
    pyrms.layer_norm_backward(p["grad_input"], p["grad_weight"], p["grad_bias"], p["grad_output"], p["input"],
                              p["weight"], 1e-5, ROWS, HIDDEN, dtype="float32", **extra)


def call_seed(p, **extra):
    pyrms.seed_rms_norm(p["out"], p["input"], p["weight"], 1e-5, ROWS, HIDDEN, dtype="float32", **extra)


OPS = {
    call_rms_norm: ("out", "input", "weight"),
    call_fused: ("input", "residual", "weight"),
    call_layer_norm: ("out", "input", "weight", "bias"),
    call_rms_backward: ("grad_input", "grad_weight", "grad_output", "input", "weight"),
    call_ln_backward: ("grad_input", "grad_weight", "grad_bias", "grad_output", "input", "weight"),
    call_seed: ("out", "input", "weight"),
}
BACKWARD = (call_rms_backward, call_ln_backward)
OP_AND_ARGUMENT = [(op, name) for op, names in OPS.items() for name in names]


def _id(value):
    return value.__name__[5:] if callable(value) else str(value)


@pytest.mark.parametrize("op, name", OP_AND_ARGUMENT, ids=_id)
@pytest.mark.parametrize("launch_device", [0, 1])
def test_a_raw_pointer_of_another_device_is_refused_before_any_launch(two, op, name, launch_device):
    driver.set_device(launch_device)
    good = Operands(launch_device)
    op(good)  # the prepared launch exists and has accepted these pointers: the refusal below is its decline
    launched = len(launches(two))
    assert launched >= 1
    bad = Operands(launch_device, elsewhere=(name,))
    with pytest.raises(ValueError) as info:
        op(bad)
    assert str(info.value) == (f"{name} pointer {bad[name]:#x} is on device {1 - launch_device}, but the launch runs on "
                               f"device {launch_device} (pyrms.driver.set_device selects the calling thread's device)")
    assert len(launches(two)) == launched  # nothing launched, and nothing allocated from a pool
    assert "cuMemAllocFromPoolAsync" not in two.names()[-5:]
    good.close()
    bad.close()


@pytest.mark.parametrize("op", BACKWARD, ids=_id)
def test_a_workspace_of_another_device_is_refused(two, op):
    p = Operands(0)
    nbytes = pyrms.backward_workspace_bytes(ROWS, HIDDEN, layer_norm=op is call_ln_backward)
    with driver.DeviceBuffer(nbytes, 0) as mine, driver.DeviceBuffer(nbytes, 1) as theirs:
        op(p, workspace=mine)
        launched = len(launches(two))
        for workspace in (theirs, theirs.ptr):  # a DeviceBuffer, a raw pointer
            with pytest.raises(ValueError, match=f"^workspace pointer {theirs.ptr:#x} is on device 1, but the launch "
                                                 f"runs on device 0"):
                op(p, workspace=workspace)
        assert len(launches(two)) == launched
    p.close()


@pytest.mark.parametrize("op, which", [(call_rms_backward, "grad_weight"), (call_ln_backward, "grad_weight"),
                                       (call_ln_backward, "grad_bias")], ids=_id)
def test_a_parameter_gradient_array_of_another_device_is_refused(two, op, which):
    p = Operands(0)
    with Tensor.empty((HIDDEN,), "float32", device=1) as elsewhere:
        arrays = {name: p[name] for name in OPS[op]}
        arrays[which] = elsewhere  # a pyrms Tensor: its own device, no driver query needed
        with pytest.raises(ValueError, match=f"^{which} is on device 1, but the launch runs on device 0"):
            op(arrays)
    assert launches(two) == []
    p.close()


@pytest.mark.parametrize("op", list(OPS), ids=_id)
def test_an_array_of_another_device_is_refused(two, op):
    with Tensor.empty((ROWS, HIDDEN), "float32", device=0) as x, Tensor.empty((ROWS, HIDDEN), "float32", device=0) as y, \
            Tensor.empty((HIDDEN,), "float32", device=0) as b, Tensor.empty((HIDDEN,), "float32", device=1) as w:
        arrays = {"out": y, "input": x, "residual": y, "grad_input": y, "grad_output": y, "weight": w, "bias": b,
                  "grad_weight": 1, "grad_bias": 1}  # the gradients are never reached: the rows and weight go first
        with pytest.raises(ValueError, match="^weight is on device 1, but the launch runs on device 0"):
            op({name: arrays[name] for name in OPS[op]})
    assert launches(two) == []


@pytest.mark.parametrize("op", list(OPS), ids=_id)
@pytest.mark.parametrize("kind", ["pyrms.Stream", "raw handle", "torch-like .cuda_stream"])
def test_a_stream_of_another_device_is_refused(two, op, kind):
    driver.set_device(1)
    p = Operands(1)
    theirs, mine = driver.Stream(device=0), driver.Stream(device=1)
    op(p, stream=mine)  # accepted: a stream of the operands' device
    op(p, stream=0)  # the legacy default stream is always the launch's device's
    launched = len(launches(two))
    given = {"pyrms.Stream": theirs, "raw handle": theirs.handle,
             "torch-like .cuda_stream": type("TorchStream", (), {"cuda_stream": theirs.handle})()}[kind]
    with pytest.raises(ValueError) as info:
        op(p, stream=given)
    assert str(info.value) == (f"stream {theirs.handle:#x} belongs to device 0, but the launch runs on device 1, where "
                               "its operands are: pass a stream of device 1 or None (pyrms.driver.set_device selects "
                               "the calling thread's device)")
    assert len(launches(two)) == launched
    # A pyrms Stream knows its device; for a handle alone the driver is asked.
    assert ("cuStreamGetDevice", (theirs.handle,)) in two.calls or kind == "pyrms.Stream"
    assert [stream for stream, _ in launches(two)] == [mine.handle] * (launched // 2) + [0] * (launched // 2)
    p.close()


@pytest.mark.parametrize("op", list(OPS), ids=_id)
def test_the_prepared_launch_asks_the_driver_nothing_per_call(two, op):
    driver.set_device(1)
    p = Operands(1)
    stream = driver.Stream(device=1)
    op(p, stream=stream.handle)  # the general path: asks about each pointer and the stream handle once
    first = len(queries(two))
    assert first == len(set(OPS[op])) + 1
    for _ in range(20):
        op(p, stream=stream.handle)
    assert len(queries(two)) == first  # the next 20 calls: dict lookups only
    assert launches(two)[-1] == (stream.handle, CONTEXT[1])
    p.close()


def test_one_device_keeps_no_check_and_asks_nothing(one):
    p = Operands(0)
    stream = driver.Stream()
    for _ in range(3):
        for op in OPS:
            op(p, stream=stream.handle)
    assert len(launches(one)) == 3 * (1 + 1 + 1 + 2 + 3 + 1)
    state = driver.process_state()
    assert queries(one) == [] and state.pointers == {} and state.streams == {}
    prepared = rms_norm_module._prepared.require("float32", HIDDEN, None, None, False, False, True)
    assert prepared.placed is None and _placement.for_device(driver.get_device(0)) is None
    p.close()


def test_an_unknown_stream_handle_names_the_driver_error(two):
    p = Operands(0)
    with pytest.raises(pyrms.CudaError, match="^cuStreamGetDevice failed: CUDA_ERROR_INVALID_HANDLE"):
        call_rms_norm(p, stream=0x5EED0)
    assert launches(two) == []
    p.close()


def test_placement_tables_are_bounded(two, monkeypatch):
    monkeypatch.setattr(_placement, "LIMIT", 3)
    device = driver.get_device(0)
    with driver.DeviceBuffer(64, 0) as buffer:
        ptr = buffer.ptr
        for k in range(5):
            _placement.check(device, {"input": ptr + 4 * k}, None)
            assert len(driver.process_state().pointers) <= 3
    assert driver.process_state().pointers == {ptr + 12: 0, ptr + 16: 0}  # emptied when full, then refilled


# --- per-device compilation, modules, prepared launches and workspaces --------------------------------


def test_one_nvrtc_run_and_one_module_per_device_context(small, monkeypatch):
    fake = FakeDriver(device_count=2)
    fresh_driver_state(monkeypatch.setattr, fake)
    runs = []
    nvrtc = compiler._nvrtc_compile
    monkeypatch.setattr(compiler, "_nvrtc_compile", lambda *args: runs.append(args[2]) or nvrtc(*args))
    dev0, dev1 = driver.get_device(0), driver.get_device(1)
    k0 = launch.get_kernel("small.cu", "k<3>", ("k<3>",), ("ptr",), dev0)
    k1 = launch.get_kernel("small.cu", "k<3>", ("k<3>",), ("ptr",), dev1)
    assert runs == ["sm_90"]  # both devices are sm_90: one NVRTC run
    loads = [args[0] for name, args in fake.calls if name == "cuLibraryLoadData"]
    assert len(loads) == 2 and loads[0] == loads[1]  # the same cubin, loaded once per device
    assert [len(dev.modules) for dev in (dev0, dev1)] == [1, 1]
    assert {fake.contexts[int(k.function)] for k in (k0, k1)} == {0xC000, 0xC001}  # each its device's context's
    assert k0 is not k1 and (k0.device, k1.device) == (dev0, dev1)
    assert launch.get_kernel("small.cu", "k<3>", ("k<3>",), ("ptr",), dev1) is k1  # kept per device: no more loads
    assert fake.names().count("cuLibraryLoadData") == 2 and runs == ["sm_90"]
    fake.param_kinds = ("ptr",)
    k1.launch(1, 32, (0x10,))
    k0.launch(1, 32, (0x10,))  # each launch from its own device's context (the fake refuses any other)
    assert [args[5] for name, args in fake.calls if name == "cuLaunchKernel"] == [0xC001, 0xC000]


def test_prepared_launches_and_kernels_are_per_device(two):
    for ordinal in (0, 1, 0):
        driver.set_device(ordinal)
        p = Operands(ordinal)
        call_rms_norm(p)
        p.close()
    assert [len(rms_norm_module._prepared.of(driver.get_device(o))) for o in (0, 1)] == [1, 1]  # the third: reused
    assert sorted({ordinal for _, _, ordinal in two.asked_for}) == [0, 1]
    assert [context for _, context in launches(two)] == [CONTEXT[0], CONTEXT[1], CONTEXT[0]]


def test_workspace_pools_are_per_device_and_released_per_device(two):
    streams = {}
    for ordinal in (0, 1):
        driver.set_device(ordinal)
        p = Operands(ordinal)
        streams[ordinal] = driver.Stream(device=ordinal)
        call_rms_backward(p, stream=streams[ordinal])
        call_ln_backward(p, stream=streams[ordinal])
        p.close()
    pools = {o: driver.get_device(o).workspace for o in (0, 1)}
    assert _workspace.pools() == [pools[0], pools[1]] and all(pool.device.ordinal == o for o, pool in pools.items())
    assert {two.owners[int(pool._pool)] for pool in pools.values()} == {0, 1}  # each made for its own device
    allocations = [args for name, args in two.calls if name == "cuMemAllocFromPoolAsync"]
    assert [(pool, stream) for _, pool, stream in allocations] == [
        (int(pools[o]._pool), streams[o].handle) for o in (0, 0, 1, 1)]  # each device's pool, on the call's stream
    before = len(two.calls)
    _workspace.release_workspaces()
    trimmed = [args[0] for name, args in two.calls[before:] if name == "cuMemPoolTrimTo"]
    assert sorted(trimmed) == sorted(int(pool._pool) for pool in pools.values())
    assert _workspace.cached_bytes() == 0


def test_two_threads_on_two_devices_keep_their_device_and_stream(two):
    calls_per_op = 30
    streams, errors = {}, []
    start = threading.Barrier(2)

    def worker(ordinal):
        try:
            driver.set_device(ordinal)
            p = Operands(ordinal)
            streams[ordinal] = stream = driver.Stream()  # made on the thread's device
            start.wait()
            for _ in range(calls_per_op):
                for op in OPS:
                    op(p, stream=stream.handle)
            p.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    run_threads_switching_often(worker, 2)
    assert errors == []
    seen = launches(two)
    kernels_per_round = 1 + 1 + 1 + 2 + 3 + 1  # the backward passes launch 2 and 3 kernels
    for ordinal in (0, 1):
        mine = [context for stream, context in seen if stream == streams[ordinal].handle]
        assert mine == [CONTEXT[ordinal]] * (calls_per_op * kernels_per_round)
    assert len(seen) == 2 * calls_per_op * kernels_per_round


def test_stream_device_reports_the_streams_device(two):
    with driver.Stream(device=1) as stream:
        assert driver.stream_device(stream.handle) == 1
    with driver.Stream(device=0) as stream:
        assert driver.stream_device(stream.handle) == 0
    with pytest.raises(pyrms.CudaError, match="cuStreamGetDevice failed: CUDA_ERROR_INVALID_HANDLE"):
        driver.stream_device(0xDEAD0)

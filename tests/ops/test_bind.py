"""pyrms.bind (pyrms/ops/_bind.py) and its BoundLaunch (pyrms/launch.py) on the CPU over tests/support/fake_driver.py:
a bound call launches exactly what the call launches (kernel, grid, block, shared bytes, stream, context, the
argument bytes as the kernel reads them, PDL), once per call of it and nothing when bound; binding checks every
argument as the call does; launch errors raise, a wrong context is made right once, other threads launch through
it; a stream of another device is refused."""
import threading
from dataclasses import replace

import pytest
from cuda.bindings import driver as real_cu

import pyrms
from pyrms import driver, errors, launch
from tests.ops.conftest import HIDDEN, ROWS
from tests.ops.test_convention import LAYER_NORM_ARGS, EveryKernel
from tests.ops.test_fake_end_to_end import ROWS_ARGS, RMS_ROWS_ARGS
from tests.ops.test_multi_device import machine

CUresult = real_cu.CUresult
RAW = dict(dtype="bfloat16")


def cases(x, w, b, y):
    """(kernel argument kinds, op, args, kwargs) of every op bound here, on Tensors and on raw pointers, few and many
    rows, with and without PDL and a weight."""
    return [
        (RMS_ROWS_ARGS, pyrms.rms_norm, (y, x, w, 1e-5), {}),
        (RMS_ROWS_ARGS, pyrms.rms_norm, (y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN), RAW),
        (RMS_ROWS_ARGS, pyrms.rms_norm, (y.ptr, x.ptr, w.ptr, 1e-5, 1, HIDDEN), dict(RAW, pdl=False)),
        (RMS_ROWS_ARGS, pyrms.rms_norm, (y.ptr, x.ptr, None, 1e-5, ROWS, HIDDEN), RAW),
        (RMS_ROWS_ARGS, pyrms.rms_norm, (y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN), dict(RAW, gemma=True)),
        (ROWS_ARGS, pyrms.fused_add_rms_norm, (x, y, w, 1e-5), {}),
        (ROWS_ARGS, pyrms.fused_add_rms_norm, (x.ptr, y.ptr, w.ptr, 1e-6, ROWS, HIDDEN), RAW),
        (LAYER_NORM_ARGS, pyrms.layer_norm, (y, x, w, b, 1e-5), {}),
        (LAYER_NORM_ARGS, "layer_norm", (y.ptr, x.ptr, w.ptr, b.ptr, 1e-5, 2, HIDDEN), RAW),
    ]


def made(fake, call) -> list:
    """The launches (fake_driver.Launch) ``call()`` makes."""
    fake.launches.clear()
    call()
    return list(fake.launches)


def function(op):
    return getattr(pyrms, op) if isinstance(op, str) else op


@pytest.mark.parametrize("index", range(9))
def test_a_bound_call_launches_what_the_call_launches(arrays, index):
    fake, x, w, b, y = arrays
    kinds, op, args, kwargs = cases(x, w, b, y)[index]
    fake.kernel_params = EveryKernel(kinds)
    with driver.Stream() as stream:
        for on in ({}, {"stream": stream}):
            expected = made(fake, lambda: function(op)(*args, **kwargs, **on))
            assert len(expected) == 1 and expected[0].args[0] in (y.ptr, x.ptr)
            fake.launches.clear()
            bound = pyrms.bind(op, *args, **kwargs, **on)
            assert fake.launches == [] and isinstance(bound, pyrms.BoundLaunch)  # binding launched nothing
            assert made(fake, bound) == expected
            assert made(fake, lambda: (bound(), bound())) == expected * 2
            # on another stream: the same launch there, the library's kernel running in the stream's context
            other = made(fake, lambda: bound(stream if not on else 0))
            assert [replace(launch_, stream=0) for launch_ in other] == [replace(e, stream=0) for e in expected]
            assert other[0].stream == (stream.handle if not on else 0)


def test_the_bound_arguments_are_the_packed_bytes_of_the_call(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    bound = pyrms.bind(pyrms.rms_norm, y.ptr, x.ptr, w.ptr, 0.1, ROWS, HIDDEN, **RAW)
    (recorded,) = bound.recorded
    assert recorded.args == (y.ptr, x.ptr, w.ptr, 0, 0.1, HIDDEN, HIDDEN, HIDDEN)
    assert made(fake, bound)[0].args[:4] == (y.ptr, x.ptr, w.ptr, 0)
    assert bound.result == y.ptr and bound.operands[0][:3] == (y.ptr, x.ptr, w.ptr)


def test_an_allocating_call_binds_its_new_output(arrays):
    fake, x, w, _, _ = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    bound = pyrms.bind(pyrms.rms_norm, x, w)
    with bound.result as out:
        assert isinstance(out, pyrms.Tensor) and out.shape == x.shape
        assert made(fake, bound)[0].args[:3] == (out.ptr, x.ptr, w.ptr)


def test_binding_checks_what_the_call_checks(arrays):
    fake, x, w, _, y = arrays
    for args, error, words in (((y.ptr, x.ptr + 1, w.ptr, 1e-5, ROWS, HIDDEN), ValueError, "input"),
                               ((y.ptr, x.ptr, w.ptr, -1.0, ROWS, HIDDEN), ValueError, "epsilon"),
                               ((y.ptr, x.ptr, w.ptr, 1e-5, 0, HIDDEN), ValueError, "num_tokens")):
        with pytest.raises(error) as bound_error:
            pyrms.bind(pyrms.rms_norm, *args, **RAW)
        with pytest.raises(error) as call_error:
            pyrms.rms_norm(*args, **RAW)
        assert str(bound_error.value) == str(call_error.value) and words in str(bound_error.value)
    assert fake.launches == []
    with pytest.raises(TypeError, match="pyrms.bind takes one of pyrms's ops.*rms_norm.*layer_norm"):
        pyrms.bind(print, 1)
    with pytest.raises(TypeError, match="got 'no_such_op'"):
        pyrms.bind("no_such_op")
    with pytest.raises(ValueError, match="launches nothing"):  # an empty batch of arrays
        with pyrms.Tensor.empty((0, HIDDEN), "bfloat16") as empty:
            pyrms.bind(pyrms.rms_norm, empty, empty, w, 1e-5)
    assert not launch.binding_now()  # every failed bind left binding mode


def test_a_backward_borrowing_its_workspace_cannot_be_bound(arrays):
    fake, x, w, b, y = arrays
    with pytest.raises(ValueError, match="borrows its workspace per call cannot be bound.*workspace="):
        pyrms.bind(pyrms.rms_norm_backward, y.ptr, b.ptr, x.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN, **RAW)
    assert fake.launches == [] and "cuMemAllocFromPoolAsync" not in fake.names()


def test_launch_errors_raise(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    bound = pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5)
    fake.launch_failures.append(CUresult.CUDA_ERROR_LAUNCH_FAILED)
    with pytest.raises(errors.CudaError, match="cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_FAILED"):
        bound()
    # a destroyed context: retried once after making the device's context current, then raised
    fake.launch_failures += [CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED] * 2
    with pytest.raises(errors.CudaError, match="CUDA_ERROR_CONTEXT_IS_DESTROYED"):
        bound()
    assert fake.launches == []
    with driver.Stream() as stream:  # a library kernel on an explicit stream: not retried, raised
        fake.launch_failures.append(CUresult.CUDA_ERROR_INVALID_HANDLE)
        with pytest.raises(errors.CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
            bound(stream)
        assert fake.launch_failures == [] and fake.launches == []


def test_a_wrong_context_is_made_right_once(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    bound = pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5)
    expected = made(fake, bound)
    fake.cuCtxSetCurrent(real_cu.CUcontext(0xBAD))  # another library's context current on this thread
    assert made(fake, bound) == expected and fake.launches[0].context == 0xC000
    tried = [args[5] for name, args in fake.calls if name == "cuLaunchKernelEx"][-2:]
    assert tried == [0xBAD, 0xC000]  # the launch in the wrong context failed, the retry ran in the device's


def test_other_threads_launch_a_bound_call(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    bound = pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5)
    expected = made(fake, bound)
    fake.launches.clear()
    failures = []

    def worker():  # a new thread: no context current, no device selected
        try:
            for _ in range(5):
                bound()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and fake.launches == expected * 15


def test_binding_records_only_the_binding_threads_launches(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    other = []
    with launch.binding() as recorded:
        thread = threading.Thread(target=lambda: other.append(made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5))))
        thread.start()
        thread.join()
        with pytest.raises(RuntimeError, match="cannot bind another"):
            with launch.binding():
                pass
    assert recorded == [] and len(other[0]) == 1  # the other thread launched


def test_a_stream_of_another_device_is_refused(monkeypatch):
    fake = machine(monkeypatch, 2)
    driver.set_device(0)
    buffers = [driver.DeviceBuffer(ROWS * HIDDEN * 4) for _ in range(3)]
    y, x, w = (buf.ptr for buf in buffers)
    bound = pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5, ROWS, HIDDEN, dtype="float32")
    with driver.Stream(1) as elsewhere, driver.Stream(0) as here:
        with pytest.raises(ValueError, match="belongs to device 1, but the launch runs on device 0"):
            bound(elsewhere)
        fake.launches.clear()
        bound(here)
        bound(here)
        assert [launch_.stream for launch_ in fake.launches] == [here.handle] * 2
        driver.set_device(1)  # a bound launch keeps to its device, whatever the thread selects
        fake.contexts[0xF00D] = 0xC000  # machine()'s kernels, as device 0's function: they run in its context only
        fake.launches.clear()
        bound()
        assert fake.launches[0].context == 0xC000
    for buf in buffers:
        buf.close()

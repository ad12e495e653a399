"""The driver and launch layers where no GPU is needed: the missing-driver path, error descriptions,
stream handle conversion, argument validation, argument packing (read back through ctypes, and
through a stand-in for cuLaunchKernel that reads the packed arguments as the driver would), and
every pyrms.driver code path over a fake cuda.bindings.driver whose "device memory" is host memory."""
import ctypes
import gc
import threading

import numpy as np
import pytest
from cuda.bindings import driver as real_cu

from tests.support.fake_driver import read_params, run_threads_switching_often
from pyrms import driver, dtypes, errors, launch
from pyrms.tensor import Tensor

CUresult = real_cu.CUresult

NO_DRIVER = driver.unavailable_reason()
needs_no_driver = pytest.mark.skipif(NO_DRIVER is None, reason="a CUDA driver is present: the missing-driver path cannot be shown")


def test_unavailable_reason_is_one_line_or_none():
    reason = driver.unavailable_reason()
    assert reason is None or (isinstance(reason, str) and reason and "\n" not in reason)
    assert driver.unavailable_reason() == reason  # cached, and still does not raise


@needs_no_driver
@pytest.mark.parametrize("make", [driver.Stream, lambda: driver.DeviceBuffer(16), driver.Event,
                                  driver.current_device, lambda: driver.get_device(0)])
def test_first_use_without_a_driver_raises_no_driver_error(make):
    with pytest.raises(errors.NoDriverError) as info:
        make()
    message = str(info.value)
    assert message.startswith("no CUDA driver found: ")
    assert "\n" not in message
    assert NO_DRIVER == message


def test_check_names_and_describes_a_failed_status():
    with pytest.raises(errors.OutOfMemoryError) as info:
        errors.check((CUresult.CUDA_ERROR_OUT_OF_MEMORY,), "cuMemAlloc")
    exc = info.value
    assert exc.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert exc.call == "cuMemAlloc"
    # From cuGetErrorString with a driver ("out of memory"), from the enum's docstring without one.
    assert "memory" in exc.description.lower()
    assert str(exc) == f"cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: {exc.description}"

    with pytest.raises(errors.CudaError) as info:
        errors.check((CUresult.CUDA_ERROR_INVALID_VALUE, None), "cuMemsetD8")
    assert type(info.value) is errors.CudaError
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert info.value.description


def test_check_returns_the_values_on_success():
    assert errors.check((CUresult.CUDA_SUCCESS,), "cuCtxSynchronize") is None
    assert errors.check((CUresult.CUDA_SUCCESS, 7), "cuDeviceGetCount") == 7
    assert errors.check((CUresult.CUDA_SUCCESS, 1, 2), "cuMemGetInfo") == (1, 2)


class TorchLikeStream:
    cuda_stream = 0xABC0


class CoreLikeStream:
    def __cuda_stream__(self):
        return (0, 0xDEF0)


def test_stream_handle_conversions():
    assert driver.stream_handle(None) == 0
    assert driver.stream_handle(0x1234) == 0x1234
    assert driver.stream_handle(TorchLikeStream()) == 0xABC0
    assert driver.stream_handle(CoreLikeStream()) == 0xDEF0
    wrapped = driver.Stream.wrap(0x5678)  # no driver call: device unknown
    assert wrapped.device is None
    assert driver.stream_handle(wrapped) == wrapped.handle == 0x5678


@pytest.mark.parametrize("bad", ["stream", 1.5, True, object()])
def test_stream_handle_rejects_other_types_naming_what_is_allowed(bad):
    with pytest.raises(TypeError, match=r"stream must be a pyrms Stream, a raw CUstream handle \(int\), "
                                        r"an object with an int \.cuda_stream"):
        driver.stream_handle(bad)


def test_stream_handle_rejects_handles_outside_64_bits():
    with pytest.raises(ValueError, match=r"stream handle must be >= 0 and below 2\*\*64, got -1"):
        driver.stream_handle(-1)
    with pytest.raises(ValueError, match=r"got 18446744073709551616"):
        driver.stream_handle(2**64)


def test_a_closed_wrapped_stream_is_refused():
    stream = driver.Stream.wrap(0x5678)
    with stream:
        pass
    stream.close()  # idempotent
    assert stream.closed
    with pytest.raises(ValueError, match="stream is closed"):
        stream.handle
    with pytest.raises(ValueError, match="stream is closed"):
        driver.stream_handle(stream)


@pytest.mark.parametrize("handle", [None, 0, 1])
def test_capture_refuses_the_legacy_default_stream(handle):
    with pytest.raises(ValueError, match=f"cannot capture the legacy default stream \\(handle {handle or 0}\\)"):
        with driver.capture(handle):
            pass


@pytest.mark.parametrize("nbytes", [0, -1, 1.5, True, "8", None])
def test_buffer_sizes_are_validated_before_any_driver_call(nbytes):
    with pytest.raises(ValueError, match=f"nbytes must be an int > 0, got {nbytes!r}"):
        driver.DeviceBuffer(nbytes)
    with pytest.raises(ValueError, match=f"nbytes must be an int > 0, got {nbytes!r}"):
        driver.PinnedBuffer(nbytes)


def test_host_arrays_must_be_c_contiguous():
    strided = np.zeros((4, 4), np.float32)[:, ::2]
    with pytest.raises(ValueError, match=r"src must be C-contiguous \(shape \(4, 2\), strides \(16, 8\)\)"):
        driver.memcpy_htod(0x1000, strided)
    with pytest.raises(ValueError, match="dst must be C-contiguous"):
        driver.memcpy_dtoh(strided, 0x1000)
    readonly = np.zeros(4, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="dst must be writeable"):
        driver.memcpy_dtoh(readonly, 0x1000)
    with pytest.raises(TypeError, match="src must be a numpy array, got list"):
        driver.memcpy_htod(0x1000, [1, 2])
    with pytest.raises(ValueError, match="byte must be in 0..255, got 256"):
        driver.memset_d8(0x1000, 256, 4)


# -- launch: argument packing ----------------------------------------------------------------------


def _slot_values(pack: launch.ArgPack) -> list:
    return read_params(pack.signature, pack.address)


def test_packed_values_are_where_the_pointers_say():
    pack = launch.ArgPack(("ptr", "i32", "i64", "u32", "f32"))
    address = pack.pack((0xFFFF_FFFF_FFFF_FFF0, -7, -(2**40), 2**32 - 1, 0.1))
    assert address == pack.address
    assert _slot_values(pack) == [0xFFFF_FFFF_FFFF_FFF0, -7, -(2**40), 2**32 - 1, np.float32(0.1)]
    assert pack.values() == (0xFFFF_FFFF_FFFF_FFF0, -7, -(2**40), 2**32 - 1, float(np.float32(0.1)))
    # Repacking rewrites the values in place: the addresses the driver reads do not move.
    assert pack.pack([1, 2, 3, 4, 5.5]) == address
    assert _slot_values(pack) == [1, 2, 3, 4, 5.5]


def test_numpy_scalars_pack_like_python_numbers():
    pack = launch.ArgPack(("ptr", "i32", "f32"))
    pack.pack((np.uint64(2**63), np.int32(-3), np.float32(2.5)))
    assert _slot_values(pack) == [2**63, -3, 2.5]


def test_signature_validation():
    with pytest.raises(ValueError, match=r"argument 1 has kind 'f64'; allowed: ptr, i32, i64, u32, f32"):
        launch.ArgPack(("ptr", "f64"))
    with pytest.raises(TypeError, match="not the string 'ptr'"):
        launch.ArgPack("ptr")
    assert launch.ArgPack(()).pack(()) != 0


def test_argument_errors_name_expected_and_got():
    pack = launch.ArgPack(("ptr", "i32", "f32"), name="rms_norm_kernel")
    with pytest.raises(TypeError, match=r"rms_norm_kernel takes 3 arguments \('ptr', 'i32', 'f32'\), got 2"):
        pack.pack((1, 2))
    with pytest.raises(ValueError, match=r"argument 0 \(ptr\) must be a device pointer.*got -1"):
        pack.pack((-1, 0, 0.0))
    with pytest.raises(ValueError, match=r"argument 1 \(i32\) must be an int in \[-2\*\*31, 2\*\*31\), got 2147483648"):
        pack.pack((0, 2**31, 0.0))
    with pytest.raises(TypeError, match=r"argument 1 \(i32\) must be an int.*got 1.5"):
        pack.pack((0, 1.5, 0.0))
    with pytest.raises(ValueError, match=r"argument 2 \(f32\) must be a float within float32 range, got 1e\+40"):
        pack.pack((0, 0, 1e40))
    with pytest.raises(TypeError, match=r"argument 2 \(f32\).*got 'x'"):
        pack.pack((0, 0, "x"))


class FakeLaunches:
    """Stands in for driver.launch_kernel: reads the arguments at call time, as cuLaunchKernel does."""

    def __init__(self, signature):
        self.signature = signature
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared, stream, params_address, pdl=False):
        record = ((gx, gy, gz), (bx, by, bz), shared, stream, tuple(read_params(self.signature, params_address)))
        assert pdl is False  # these tests launch without PDL (the fake driver's tests launch with it)
        with self.lock:
            self.calls.append((threading.get_ident(), record))


def test_kernel_launch_normalizes_dims_and_passes_values(monkeypatch):
    fake = FakeLaunches(("ptr", "i64"))
    monkeypatch.setattr(driver, "launch_kernel", fake)
    kernel = launch.Kernel(object(), "add_one", ("ptr", "i64"))
    kernel.launch(7, 128, (0x7000, 99))
    kernel.launch((2, 3), (32, 4, 2), (0x7008, -1), stream=5, shared_bytes=64)
    assert [record for _, record in fake.calls] == [
        ((7, 1, 1), (128, 1, 1), 0, None, (0x7000, 99)),
        ((2, 3, 1), (32, 4, 2), 64, 5, (0x7008, -1)),
    ]
    with pytest.raises(TypeError, match=r"add_one takes 2 arguments \('ptr', 'i64'\), got 3"):
        kernel.launch(1, 1, (1, 2, 3))
    for bad in (0, (1, 2, 3, 4), (1.5,), (), True, -2):
        with pytest.raises(ValueError, match="grid must be a positive int or a tuple of 1 to 3 positive ints"):
            kernel.launch(bad, 1, (1, 2))
    with pytest.raises(ValueError, match=r"block must be .*got \(0, 1\)"):
        kernel.launch(1, (0, 1), (1, 2))


def test_eight_threads_launching_at_once_keep_their_own_arguments(monkeypatch):
    fake = FakeLaunches(("ptr", "i32", "f32"))
    monkeypatch.setattr(driver, "launch_kernel", fake)
    kernel = launch.Kernel(object(), "k", ("ptr", "i32", "f32"))
    launches = 2000
    start = threading.Barrier(8)
    expected = {}

    def worker(index):
        start.wait()
        expected[threading.get_ident()] = index
        for i in range(launches):
            kernel.launch(1, 1, (index << 32 | i, index, float(i)))

    run_threads_switching_often(worker, 8)  # a shared pack would be caught mid-launch
    assert len(fake.calls) == 8 * launches
    seen = {}
    for ident, record in fake.calls:
        index = expected[ident]
        ptr, value, number = record[4]
        i = seen.get(ident, 0)
        assert (ptr, value, number) == (index << 32 | i, index, float(i))
        seen[ident] = i + 1


def test_kernel_not_found_is_a_key_error_with_a_plain_message():
    exc = launch.KernelNotFoundError("no kernel named 'nope' in module 0123456789ab")
    assert isinstance(exc, KeyError) and isinstance(exc, errors.PyrmsError)
    assert str(exc) == "no kernel named 'nope' in module 0123456789ab"


def test_load_module_validates_the_image_before_any_driver_call():
    with pytest.raises(TypeError, match="cubin must be bytes, got str"):
        launch.load_module("not bytes")
    with pytest.raises(ValueError, match="cubin is empty"):
        launch.load_module(b"")


# -- the whole driver layer over a fake cuda.bindings.driver (conftest's ``fake``) ------------------


def test_fake_device_properties_and_primary_context(fake):
    assert driver.unavailable_reason() is None
    device = driver.current_device()
    assert (device.name, device.arch, device.compute_capability) == ("Fake H200", "sm_90", (9, 0))
    assert (device.multiprocessor_count, device.l2_cache_bytes, device.max_threads_per_block) == (132, 50 << 20, 1024)
    assert (device.total_memory, device.mem_info()) == (1 << 25, (1 << 24, 1 << 25))
    with pytest.raises(ValueError, match=r"device ordinal 3 is out of range: this machine has 1 CUDA device\(s\), "
                                         r"ordinals 0\.\.0"):
        driver.set_device(3)
    # Retained once, set current once; set again only after someone else switched contexts.
    driver.current_device()
    assert fake.names().count("cuDevicePrimaryCtxRetain") == 1
    assert fake.names().count("cuCtxSetCurrent") == 1
    fake.cuCtxSetCurrent(real_cu.CUcontext(0xBEEF))  # e.g. torch.cuda.set_device(1) on this thread
    device.make_current()
    assert fake.names().count("cuCtxSetCurrent") == 3
    assert int(fake.cuCtxGetCurrent()[1]) == 0xC000


def test_each_thread_selects_its_own_device(fake):
    fake.device_count = 2
    assert driver.selected_device() is driver.get_device(0)  # nothing selected: device 0
    seen = {}

    def other_thread():
        seen["before"] = driver.selected_device()
        driver.set_device(1)
        seen["after"] = driver.selected_device()

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert seen == {"before": driver.get_device(0), "after": driver.get_device(1)}
    assert driver.selected_device() is driver.get_device(0)  # this thread's choice is its own
    assert driver.set_device(1) is driver.selected_device() is driver.current_device() is driver.get_device(1)
    assert int(fake.cuCtxGetCurrent()[1]) == 0xC001  # set_device made device 1's context current


def test_fake_buffers_free_once_and_restore_the_callers_context(fake):
    buffer = driver.DeviceBuffer(100)
    ptr = buffer.ptr
    assert driver.pointer_device(ptr + 99) == 0
    assert driver.pointer_device(ptr + 100) is None
    buffer.close()
    buffer.close()
    assert fake.names().count("cuMemFree") == 1
    # Garbage collection frees too, with the buffer's context pushed and the caller's restored.
    leaked = driver.DeviceBuffer(100)
    leaked_ptr = leaked.ptr
    fake.cuCtxSetCurrent(real_cu.CUcontext(0xBEEF))
    del leaked
    gc.collect()
    assert ("cuMemFree", (leaked_ptr,)) in fake.calls
    assert int(fake.cuCtxGetCurrent()[1]) == 0xBEEF


def test_fake_out_of_memory_message_and_recovery(fake):
    with pytest.raises(errors.OutOfMemoryError, match=r"cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: out of "
                                                      r"memory: asked for 20000000 bytes on device 0, "
                                                      r"16777216 of 33554432 bytes are free"):
        driver.DeviceBuffer(20_000_000)
    with driver.DeviceBuffer(1000) as buffer:
        assert buffer.ptr


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_fake_tensor_round_trips_views_and_poison(fake, dtype):
    np_dtype = dtypes.get(dtype).numpy
    host = np.arange(200, dtype=np.float32).astype(np_dtype)
    with Tensor.from_numpy(host) as parent:
        np.testing.assert_array_equal(parent.to_numpy(), host)
        rows = parent.row_view(num_rows=4, hidden=7, row_stride=13, offset=3)
        expected = np.stack([host[3 + 13 * r: 10 + 13 * r] for r in range(4)])
        np.testing.assert_array_equal(rows.to_numpy(), expected)
        rows.fill_bytes(0)
        after = parent.to_numpy()
        assert (after[3:49] == 0).all()
        np.testing.assert_array_equal(after[:3], host[:3])
        np.testing.assert_array_equal(after[49:], host[49:])
        view = parent.view(51, (3,))
        view.copy_from_numpy(np.array([-1, -2, -3], np.float32).astype(np_dtype))
        np.testing.assert_array_equal(parent.to_numpy()[50:55].astype(np.float32), [50, -1, -2, -3, 54])
        with pytest.raises(ValueError, match="copy_from_numpy needs a contiguous tensor"):
            rows.copy_from_numpy(expected)
        with pytest.raises(ValueError, match=r"array shape \(2,\) does not match the tensor's \(3,\)"):
            view.copy_from_numpy(np.zeros(2, np_dtype))
        if dtype == "bfloat16":  # no __cuda_array_interface__ (pyrms/tensor.py says why); DLPack carries the device
            assert rows.__dlpack_device__() == (2, 0)
        else:
            assert Tensor.from_cuda_array(rows).device == 0
            foreign = type("Foreign", (), {"__cuda_array_interface__": rows.__cuda_array_interface__})()
            assert Tensor.from_cuda_array(foreign).device == 0  # the driver's answer for the pointer
    assert rows.closed and view.closed
    with pytest.raises(ValueError, match="tensor is closed"):
        rows.to_numpy()


def test_fake_pinned_buffer_view(fake):
    pinned = driver.PinnedBuffer(64)
    view = pinned.numpy(np.int32)
    view[:] = np.arange(16)
    assert ctypes.c_int32.from_address(pinned.ptr + 8).value == 2
    del pinned
    gc.collect()
    assert "cuMemFreeHost" not in fake.names()  # the view keeps the buffer alive
    del view
    gc.collect()
    assert "cuMemFreeHost" in fake.names()


def test_fake_streams_events_and_copies_on_streams(fake):
    stream = driver.Stream(non_blocking=True)
    start, end = driver.Event(), driver.Event()
    start.record(stream)
    with driver.DeviceBuffer(16) as buffer:
        driver.memset_d8(buffer.ptr, 5, 16, stream=stream)
        assert fake.calls[-1] == ("cuMemsetD8Async", (buffer.ptr, 5, 16, stream.handle))
    end.record(stream)
    assert end.elapsed_ms(start) == 0.25
    handle = stream.handle
    stream.close()
    stream.close()
    assert fake.names().count("cuStreamDestroy") == 1
    driver.Stream.wrap(handle).close()  # not owned: not destroyed again
    assert fake.names().count("cuStreamDestroy") == 1


def test_fake_graph_capture(fake):
    stream = driver.Stream()
    with driver.DeviceBuffer(16) as buffer:
        with driver.capture(stream) as graph:
            driver.memset_d8(buffer.ptr, 1, 16, stream=stream)
            with pytest.raises(ValueError, match="capture has not finished"):
                graph.launch(stream)
        graph.launch(stream)
        graph.launch(stream)
        assert fake.names().count("cuGraphInstantiate") == 1
        assert fake.names().count("cuGraphLaunch") == 2
        graph.close()
        assert fake.names()[-2:] == ["cuGraphExecDestroy", "cuGraphDestroy"]
        with pytest.raises(KeyError):
            with driver.capture(stream):
                raise KeyError("boom")
        assert fake.names()[-2:] == ["cuStreamEndCapture", "cuGraphDestroy"]


def test_fake_modules_kernels_and_launches(fake):
    fake.functions = {b"present"}
    module = launch.load_module(b"cubin bytes")
    assert launch.load_module(bytearray(b"cubin bytes"), 0) is module
    assert fake.names().count("cuLibraryLoadData") == 1 and len([n for n in fake.names() if n.endswith("LoadData")]) == 1
    kernel = module.function("present", ("ptr", "i32"))
    assert module.function("present", ("ptr", "i32")) is kernel
    # A library's CUkernel launches anywhere; its function (the general path's) in the device's context.
    assert kernel.any_context and kernel.function is not kernel.handle
    assert fake.contexts[int(kernel.function)] == 0xC000
    with pytest.raises(launch.KernelNotFoundError, match=r"^no kernel named 'absent' in module [0-9a-f]{12}$"):
        module.function("absent", ())
    fake.cuCtxSetCurrent(real_cu.CUcontext(0xBEEF))  # the kernel's context is made current for the launch
    kernel.launch((3, 2), 64, (0x1234, -9), stream=driver.Stream.wrap(0x77))
    assert fake.calls[-1] == ("cuLaunchKernel", (int(kernel.function), (3, 2, 1), (64, 1, 1), 0, 0x77, 0xC000,
                                                 (0x1234, -9)))
    before = len(fake.calls)
    kernel.set_max_dynamic_shared(100_000)
    attribute = real_cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    set_calls = [call for call in fake.calls[before:] if call[0].endswith("SetAttribute")]
    # the CUkernel's attribute on this device, and its function's, since launches use either
    assert set_calls == [("cuKernelSetAttribute", (attribute, 100_000, int(kernel.handle), 0)),
                         ("cuFuncSetAttribute", (int(kernel.function), attribute, 100_000))]


def test_a_fresh_fake_starts_with_no_device_selected_where_the_hot_path_reads_it(fake):
    assert driver._selected.device is None  # ops/rms_norm.py's prepared-launch key reads it so
    device = driver.set_device(0)
    assert driver._selected.device is device is driver.selected_device()
    assert device.name == "Fake H200"

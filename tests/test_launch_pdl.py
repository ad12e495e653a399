"""Programmatic dependent launch on the host side, without a GPU: the launch configuration pyrms hands
to cuLaunchKernelEx (read back from its C struct, as the driver reads it), and Kernel.launch and
RowLaunch with and without ``pdl`` over conftest's fake driver, which logs each launch's grid, block,
shared bytes, stream, context, arguments and whether the PDL attribute was among those the driver
reads. A wrong context is retried once on either path."""
import ctypes
import gc
import threading

import pytest
from cuda.bindings import driver as real_cu

from tests.support.fake_driver import run_threads_switching_often
from pyrms import driver, errors, launch

CUresult = real_cu.CUresult
SIGNATURE = ("ptr", "i32")  # the fake driver reads launch arguments as these kinds


class LaunchConfigStruct(ctypes.Structure):
    """CUlaunchConfig as cuda.h lays it out."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


class LaunchAttributeStruct(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, then a 64-byte union whose first int is
    programmaticStreamSerializationAllowed."""

    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int)]


def test_pdl_config_is_what_the_driver_reads():
    config = driver.pdl_config(160, 2, 1, 4096)
    gc.collect()  # the attribute object pdl_config built is gone: the config must not point into it
    raw = LaunchConfigStruct.from_address(config.getPtr())
    assert (tuple(raw.grid), tuple(raw.block), raw.shared, raw.stream) == ((1, 1, 1), (160, 2, 1), 4096, None)
    assert raw.num_attrs == 1 and raw.attrs
    attribute = LaunchAttributeStruct.from_address(raw.attrs)
    assert attribute.id == int(real_cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) == 6
    assert attribute.value == 1
    config.gridDimX, config.hStream = 7, 0x55  # what callers set per launch: an int handle is taken
    assert (raw.grid[0], raw.stream) == (7, 0x55)


def launches(fake):
    """The launch attempts the fake logged: (call, grid, block, shared, stream, context, args[, pdl])."""
    return [(name, *args[1:]) for name, args in fake.calls if name.startswith("cuLaunchKernel")]


@pytest.fixture
def kernel(fake):
    return launch.load_module(b"cubin").function("present", SIGNATURE)


def test_kernel_launch_with_and_without_pdl(fake, kernel):
    stream = driver.Stream()
    kernel.launch((3, 2), (64, 2), (0x1234, -9), stream=stream, shared_bytes=128)
    kernel.launch(5, 32, (0x5678, 11), stream=0x77, pdl=True)
    kernel.launch((1, 4, 2), 128, (0x9ABC, 12), stream=stream, shared_bytes=256, pdl=True)  # every field reset
    ctx = 0xC000
    assert launches(fake) == [
        ("cuLaunchKernel", (3, 2, 1), (64, 2, 1), 128, stream.handle, ctx, (0x1234, -9)),
        ("cuLaunchKernelEx", (5, 1, 1), (32, 1, 1), 0, 0x77, ctx, (0x5678, 11), True),
        ("cuLaunchKernelEx", (1, 4, 2), (128, 1, 1), 256, stream.handle, ctx, (0x9ABC, 12), True),
    ]


def test_pdl_launches_may_be_captured(fake, kernel):
    stream = driver.Stream()
    with driver.capture(stream) as graph:
        kernel.launch(1, 32, (0x10, 1), stream=stream, pdl=True)
    assert fake.names()[-3:] == ["cuStreamBeginCapture", "cuLaunchKernelEx", "cuStreamEndCapture"]
    graph.close()


def test_row_launch_with_and_without_pdl(fake, kernel):
    device = driver.current_device()
    plain = launch.RowLaunch(SIGNATURE, 160, (4096,), device)
    pdl = launch.RowLaunch(SIGNATURE, 96, (5120,), device, shared_bytes=512, pdl=True)
    plain(kernel, 1, 0x70, 0x1000)
    pdl(kernel, 2, 0x70, 0x2000)
    pdl(kernel, 3, 0x70, 0x3000)  # same stream: the config keeps it
    pdl(kernel, 4, 0x80, 0x4000)  # another stream: set again
    pdl(kernel, 5, 0x70, 0x5000)
    pdl(kernel, 5, 0x70, 0x5100)  # same grid: the config keeps it
    pdl(kernel, 2, 0x70, 0x5200)  # another grid: set again
    plain(kernel, 6, 0x80, 0x6000)
    ctx = 0xC000
    ex = [("cuLaunchKernelEx", (grid, 1, 1), (96, 1, 1), 512, stream, ctx, (ptr, 5120), True)
          for grid, stream, ptr in ((2, 0x70, 0x2000), (3, 0x70, 0x3000), (4, 0x80, 0x4000), (5, 0x70, 0x5000),
                                    (5, 0x70, 0x5100), (2, 0x70, 0x5200))]
    assert launches(fake) == [
        ("cuLaunchKernel", (1, 1, 1), (160, 1, 1), 0, 0x70, ctx, (0x1000, 4096)),
        *ex,
        ("cuLaunchKernel", (6, 1, 1), (160, 1, 1), 0, 0x80, ctx, (0x6000, 4096)),
    ]
    assert (plain.pdl, pdl.pdl) == (False, True)


def other_library_switches_context(fake):
    fake.cuCtxSetCurrent(real_cu.CUcontext(0xBEEF))  # e.g. torch.cuda.set_device(1) on this thread


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("how, stream", [("Kernel.launch", 0x70), ("Kernel.launch", 0), ("RowLaunch", 0),
                                         ("RowLaunch", 1)])
def test_a_wrong_context_is_retried_once(fake, kernel, how, stream, pdl):
    """Launches in the current context (the general path's, and any on a default stream) launch the
    device context's function, which fails in another context, and are retried there."""
    rows = launch.RowLaunch(SIGNATURE, 64, (7,), driver.current_device(), pdl=pdl)
    run = {"Kernel.launch": lambda grid: kernel.launch(grid, 64, (0x1000, 7), stream=stream, pdl=pdl),
           "RowLaunch": lambda grid: rows(kernel, grid, stream, 0x1000)}[how]
    run(1)  # the launch layer now trusts this thread's context...
    other_library_switches_context(fake)
    run(2)  # ...so this launch fails first, in the other context
    name = "cuLaunchKernelEx" if pdl else "cuLaunchKernel"
    assert [(call, grid[0], ctx) for call, grid, _, _, _, ctx, *_ in launches(fake)] == [
        (name, 1, 0xC000), (name, 2, 0xBEEF), (name, 2, 0xC000)]
    function = int(kernel.function)
    assert [args[0] for call, args in fake.calls if call == name] == [function] * 3


@pytest.mark.parametrize("pdl", [False, True])
def test_a_library_kernel_on_an_explicit_stream_runs_in_the_streams_context(fake, kernel, pdl):
    """A RowLaunch passes the CUkernel itself on an explicit stream, whose context runs it: nothing is
    made current, whatever another library made current on the thread."""
    device = driver.current_device()
    stream = driver.Stream()
    rows = launch.RowLaunch(SIGNATURE, 64, (7,), device, pdl=pdl)
    other_library_switches_context(fake)
    before = fake.names().count("cuCtxSetCurrent")
    rows(kernel, 3, stream.handle, 0x1000)
    assert fake.names().count("cuCtxSetCurrent") == before  # no context switch for it
    name = "cuLaunchKernelEx" if pdl else "cuLaunchKernel"
    assert [(call, args[0], args[4], args[5]) for call, args in fake.calls if call == name] == [
        (name, int(kernel.handle), stream.handle, 0xC000)]
    stream.close()


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("how", ["Kernel.launch", "RowLaunch"])
def test_other_launch_errors_are_raised_not_retried(fake, kernel, how, pdl):
    rows = launch.RowLaunch(SIGNATURE, 64, (7,), driver.current_device(), pdl=pdl)
    run = {"Kernel.launch": lambda: kernel.launch(1, 64, (0x1000, 7), pdl=pdl),
           "RowLaunch": lambda: rows(kernel, 1, 0, 0x1000)}[how]
    fake.launch_failures.append(CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    with pytest.raises(errors.CudaError) as info:
        run()
    name = "cuLaunchKernelEx" if pdl else "cuLaunchKernel"
    assert (info.value.call, info.value.name) == (name, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    assert len(launches(fake)) == 1


@pytest.mark.parametrize("how", ["Kernel.launch", "RowLaunch"])
def test_eight_threads_launching_with_pdl_keep_their_own_grid_and_stream(fake, kernel, how):
    """Each thread's configuration is its own: the fake lets other threads run before it reads the
    config, so a shared one would show another thread's grid or stream."""
    rows = launch.RowLaunch(SIGNATURE, 64, (7,), driver.current_device(), pdl=True)
    run = {"Kernel.launch": lambda grid, stream: kernel.launch(grid, 64, (grid, 7), stream=stream, pdl=True),
           "RowLaunch": lambda grid, stream: rows(kernel, grid, stream, grid)}[how]
    count = 300
    start = threading.Barrier(8)

    def worker(index):
        driver.current_device()  # this thread's context current, as any pyrms caller's is
        start.wait()
        for i in range(count):
            run(index * count + i + 1, 0x100 + index)

    run_threads_switching_often(worker, 8)
    made = launches(fake)
    assert len(made) == 8 * count
    for _, grid, _, _, stream, _, (ptr, _), pdl in made:
        assert pdl and ptr == grid[0] and stream == 0x100 + (grid[0] - 1) // count

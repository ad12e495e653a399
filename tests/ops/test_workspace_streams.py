"""The backward's workspaces and short-lived streams (a server's stream per request), on the CPU over
fake_driver.FakeDriver: the kernels are not run, the workspace bookkeeping is."""
import pytest

import pyrms
from tests.support.hostile_cases import environment
from pyrms import driver
from pyrms.ops import _workspace

STREAMS = 20


def test_the_workspace_of_a_closed_stream_does_not_stay_allocated(monkeypatch):
    # Found in hardening (docs/reliability.md): the first design kept one workspace (>= 2 MiB) per raw stream handle for
    # the life of the process. Now each call allocates and frees on its stream (stream-ordered).
    with environment("device"):
        monkeypatch.setattr(driver, "launch_kernel", lambda *args: None)  # the fake has no kernels to run
        x, dy, gi = (pyrms.Tensor.empty((4, 64), "float32") for _ in range(3))  # values do not matter here
        w, gw = pyrms.Tensor.empty((64,), "float32"), pyrms.Tensor.empty((64,), "float32")
        free_before = driver.current_device().mem_info()[0]
        for _ in range(STREAMS):
            stream = pyrms.Stream()
            pyrms.rms_norm_backward(gi, gw, dy, x, w, 1e-6, 4, 64, stream=stream)
            stream.synchronize()
            stream.close()
        held, pools = _workspace.cached_bytes(), len(_workspace.pools())
        free_after = driver.current_device().mem_info()[0]
        monkeypatch.undo()
    assert pools == 1  # one pool for the device, whatever the streams
    assert held == 0 and free_after == free_before, (
        f"{STREAMS} closed streams left {held} bytes in the workspace pool "
        f"({(free_before - free_after) >> 10} KiB of device memory)")


def test_memory_pool_allocates_on_a_stream_and_names_what_is_wrong():
    with environment("device"):
        pool = driver.MemoryPool(keep_bytes=1 << 20)
        stream = pyrms.Stream()
        ptr = pool.allocate(4096, stream)
        assert ptr and pool.used_bytes == 4096  # the fake counts live allocations
        pool.free(ptr, stream)
        assert pool.used_bytes == 0
        with pytest.raises(ValueError, match=r"nbytes must be an int > 0, got 0"):
            pool.allocate(0, stream)
        with pytest.raises(pyrms.OutOfMemoryError, match=r"asked for 1099511627776 bytes on device 0"):
            pool.allocate(1 << 40, stream)
        pool.close()
        with pytest.raises(ValueError, match="memory pool is closed"):
            pool.allocate(16, stream)
        stream.close()

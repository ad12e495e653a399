"""The last call of rms_norm, fused_add_rms_norm and layer_norm on raw pointers, bound when it repeats
(pyrms/ops/_prepared.py, LastCall), on the CPU over tests/support/fake_driver.py: a repeated call launches what
the first launched, through the bound launch; any argument that differs, a value of another type that compares
equal (True == 1), a stream object, another selected device or another few-row threshold goes through the checks
again, which raise what they raise without the memo."""
import pytest

import pyrms
from pyrms import driver, launch
from pyrms.ops.fused_add_rms_norm import op as fused_op
from pyrms.ops.layer_norm import op as ln_op
from pyrms.ops.rms_norm import op as rms_op
from tests.ops.conftest import HIDDEN, ROWS
from tests.ops.test_bind import made
from tests.ops.test_convention import LAYER_NORM_ARGS, EveryKernel
from tests.ops.test_fake_end_to_end import ROWS_ARGS, RMS_ROWS_ARGS
from tests.ops.test_multi_device import machine
from tests.support.testing import forced_row_variant

RAW = dict(dtype="bfloat16")


def ops(x, w, b, y):
    """(kinds, the op's module, a call with keyword overrides) of each op with a last-call memo."""
    return [
        (RMS_ROWS_ARGS, rms_op,
         lambda eps=1e-5, rows=ROWS, **k: pyrms.rms_norm(y, x, w, eps, rows, HIDDEN, **RAW, **k)),
        (ROWS_ARGS, fused_op,
         lambda eps=1e-5, rows=ROWS, **k: pyrms.fused_add_rms_norm(x, y, w, eps, rows, HIDDEN, **RAW, **k)),
        (LAYER_NORM_ARGS, ln_op,
         lambda eps=1e-5, rows=ROWS, **k: pyrms.layer_norm(y, x, w, b, eps, rows, HIDDEN, **RAW, **k)),
    ]


@pytest.fixture
def pointers(arrays):
    fake, x, w, b, y = arrays
    return fake, x.ptr, w.ptr, b.ptr, y.ptr


@pytest.mark.parametrize("index", range(3))
def test_a_repeated_call_launches_the_same_through_its_bound_launch(pointers, index):
    fake, *operands = pointers
    kinds, module, call = ops(*operands)[index]
    fake.kernel_params = EveryKernel(kinds)
    first = made(fake, call)
    assert len(first) == 1 and module._last.pair[1] is None  # seen once: not bound
    assert made(fake, call) == first and isinstance(module._last.pair[1], launch.BoundLaunch)  # twice: bound
    bound = module._last.pair[1]
    calls = len(fake.calls)
    assert made(fake, lambda: (call(), call())) == first * 2 and module._last.pair[1] is bound
    assert [name for name, _ in fake.calls[calls:]] == ["cuLaunchKernelEx"] * 2  # nothing but the launches
    other = made(fake, lambda: call(eps=0.5))  # another call: checked and launched as usual, and the memo replaced
    assert other != first and module._last.pair == (module._last.pair[0], None)
    assert made(fake, call) == first


@pytest.mark.parametrize("index", range(3))
def test_equal_values_of_other_types_are_checked(pointers, index):
    fake, *operands = pointers
    kinds, _, call = ops(*operands)[index]
    fake.kernel_params = EveryKernel(kinds)
    for _ in range(3):  # bound for (epsilon 1.0, one row)
        call(eps=1.0, rows=1)
    for changed in (dict(eps=True, rows=1), dict(eps=1.0, rows=True)):
        fake.launches.clear()
        with pytest.raises((TypeError, ValueError)) as memo:
            call(**changed)
        call(eps=0.25)  # another call in between: the memo forgets the bound one
        with pytest.raises(type(memo.value)) as fresh:
            call(**changed)
        assert str(memo.value) == str(fresh.value) and all(launch_.args[3] != 1.0 for launch_ in fake.launches)


def test_a_stream_object_is_never_memoized(pointers):
    fake, x, w, _, y = pointers
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    stream = driver.Stream()
    for _ in range(3):
        pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, stream=stream)
    assert rms_op._last.pair[1] is None
    stream.close()
    with pytest.raises(ValueError, match="closed"):
        pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, stream=stream)


def test_the_few_row_threshold_is_part_of_the_call(pointers):
    fake, x, w, _, y = pointers
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    few = [made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN)) for _ in range(3)]
    with forced_row_variant("many"):
        many = made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN))
    assert few[0] == few[2] and many[0].kernel != few[0][0].kernel


def test_binding_a_memoized_call_records_it(pointers):
    fake, x, w, _, y = pointers
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    first = [made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN)) for _ in range(3)][0]
    fake.launches.clear()
    bound = pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5, ROWS, HIDDEN)
    assert fake.launches == [] and made(fake, bound) == first
    assert made(fake, lambda: pyrms.bind(pyrms.rms_norm, y, x, w, 1e-5, ROWS, HIDDEN)) == []  # binding again


def test_another_selected_device_is_checked(monkeypatch):
    machine(monkeypatch, 2)
    driver.set_device(0)
    buffers = [driver.DeviceBuffer(ROWS * HIDDEN * 4) for _ in range(3)]
    y, x, w = (buf.ptr for buf in buffers)
    for _ in range(3):
        pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, dtype="float32")
    assert rms_op._last.pair[1] is not None
    driver.set_device(1)
    with pytest.raises(ValueError, match="is on device 0, but the launch runs on device 1"):
        pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, dtype="float32")
    for buf in buffers:
        buf.close()


def test_launch_prepared_is_the_raw_call_for_adapters(pointers):
    fake, x, w, _, y = pointers
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    expected = made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, dtype="bfloat16"))
    static = ("bfloat16", HIDDEN, HIDDEN, HIDDEN, False, False, True, None, None, None)
    args = (y, x, w, 1e-5, ROWS, 0)
    for _ in range(3):  # seen, bound, launched through the bound launch
        assert made(fake, lambda: rms_op.launch_prepared(static, args)) == expected
    assert isinstance(rms_op._last.pair[1], launch.BoundLaunch)
    fake.launches.clear()
    assert not rms_op.launch_prepared(static, (y, x + 1, w, 1e-5, ROWS, 0))  # misaligned: declined, nothing launched
    assert not rms_op.launch_prepared(("bfloat16", -1) + static[2:], args)  # invalid static arguments: declined
    assert fake.launches == []


def test_launch_prepared_takes_an_rstd(pointers):
    """pyrms.torch's forward under autograd also stores each row's inv_rms: the same memo with rstd's pointer last,
    bound when it repeats; another rstd address (a new block from torch's allocator) is checked and launched again,
    and an rstd overlapping the output is declined."""
    fake, x, w, _, y = pointers
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    rstd, other = (driver.DeviceBuffer(4 * ROWS) for _ in range(2))
    expected = made(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, ROWS, HIDDEN, dtype="bfloat16", rstd=rstd.ptr))
    assert rstd.ptr in expected[0].args
    static = ("bfloat16", HIDDEN, HIDDEN, HIDDEN, False, False, True, None, None, None)
    args = (y, x, w, 1e-5, ROWS, 0, rstd.ptr)
    for _ in range(3):  # seen, bound, launched through the bound launch
        assert made(fake, lambda: rms_op.launch_prepared(static, args)) == expected
    assert isinstance(rms_op._last.pair[1], launch.BoundLaunch)
    moved = made(fake, lambda: rms_op.launch_prepared(static, args[:6] + (other.ptr,)))
    assert other.ptr in moved[0].args and rms_op._last.pair[1] is None
    fake.launches.clear()
    assert not rms_op.launch_prepared(static, args[:6] + (y,))  # rstd over the output: declined, nothing launched
    assert fake.launches == []
    for b in (rstd, other):
        b.close()


def test_the_torch_backward_is_bound_when_it_repeats(fake):
    """pyrms.torch's eager backward (_norm_backward.prepared.launch_prepared, raw pointers and a workspace of its
    own): seen once, bound the second time, then nothing but its two launches; another workspace address (torch's
    allocator handing out another block) goes through the checks again and replaces the memo; a call the prepared
    launch declines launches nothing."""
    from pyrms.ops._norm_backward import plan as bwd_plan
    from pyrms.ops._norm_backward import prepared as bwd_prepared
    from tests.ops.test_fake_end_to_end import (BACKWARD_ROWS_ARGS, BACKWARD_STAGED_ARGS, BACKWARD_SUM_ARGS, buffers,
                                                expect_kinds)

    hidden, rows = 5120, 300
    p = bwd_plan.plan_norm_backward("bfloat16", hidden)
    expect_kinds(fake, p, (p.expression,), BACKWARD_ROWS_ARGS)
    expect_kinds(fake, p, (p.staged_expression,), BACKWARD_STAGED_ARGS)
    expect_kinds(fake, p, (p.sum_expression,), BACKWARD_SUM_ARGS)
    stream = driver.Stream()
    gi, gw, go, x, w = buffers(2 * rows * hidden, 2 * hidden, 2 * rows * hidden, 2 * rows * hidden, 2 * hidden)
    prepared = bwd_prepared._prepared.get(False, "bfloat16", None, hidden, hidden, hidden, hidden, False, None, False,
                                          False, True, None, None)
    nbytes = prepared.workspace_bytes(gi.ptr, go.ptr, x.ptr, w.ptr, rows)
    ws, other_ws = buffers(nbytes, nbytes)
    args = (gi.ptr, go.ptr, x.ptr, w.ptr, (gw.ptr,), 1e-6, rows, stream.handle, ws.ptr, 0, 0)
    expected = made(fake, lambda: prepared(*args))
    assert len(expected) == 2 and expected[0].args[1] == ws.ptr
    for _ in range(3):  # seen, bound, launched through the bound launch
        assert made(fake, lambda: bwd_prepared.launch_prepared(prepared, args)) == expected
    assert isinstance(bwd_prepared._last.pair[1], launch.BoundLaunch)
    calls = len(fake.calls)
    assert made(fake, lambda: bwd_prepared.launch_prepared(prepared, args)) == expected
    assert [name for name, _ in fake.calls[calls:]] == ["cuLaunchKernelEx"] * 2  # nothing but the launches
    moved = args[:8] + (other_ws.ptr,) + args[9:]
    launched = made(fake, lambda: bwd_prepared.launch_prepared(prepared, moved))
    assert launched[0].args[1] == other_ws.ptr and bwd_prepared._last.pair[1] is None
    assert not bwd_prepared.launch_prepared(prepared, (gi.ptr + 1,) + args[1:])  # misaligned dx: declined
    assert made(fake, lambda: bwd_prepared.launch_prepared(prepared, args)) == expected
    for b in (gi, gw, go, x, w, ws, other_ws, stream):
        b.close()

"""The host section's recording of one call's launches (pyrms/bench/host.py, recorded_launches), on the CPU over
tests/support/fake_driver.py: a call records the launch it makes whether it launches through its prepared launch,
binds itself (the second call in a row: its binding's recorded launch is not made, and not recorded) or
launches its bound launch (the third); pyrms.bind's launches are recorded as they are made."""
import pyrms
from pyrms.bench import host
from tests.ops.conftest import HIDDEN, ROWS, arrays  # noqa: F401  (the fixture)


def test_every_call_records_the_one_launch_it_makes(arrays):
    fake, x, w, _, y = arrays
    for step in range(4):  # prepared, bound after launching, then through the bound launch
        fake.launches.clear()
        with host.recorded_launches() as made:
            pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN, dtype="bfloat16")
        assert len(made) == 1 == len(fake.launches), step
        kernel, grid, block, args, stream, shared = made[0]
        assert (host._dims3(grid), args[:3], stream) == (fake.launches[0].grid, (y.ptr, x.ptr, w.ptr), 0), step
    bound = pyrms.bind(pyrms.fused_add_rms_norm, x, y, w, 1e-5)
    with host.recorded_launches() as made:
        bound()
        bound()
    assert [m[3][:3] for m in made] == [(x.ptr, y.ptr, w.ptr)] * 2

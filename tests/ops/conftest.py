"""Fixtures of the ops' CPU tests: the backward's launches recorded on a fake device (``recorded``), and small
operands on the fake driver (``arrays``)."""
import pytest

import pyrms
from pyrms import driver, launch
from tests.support.hostile_cases import environment


@pytest.fixture
def recorded(monkeypatch):
    """A fake device whose launches are recorded as (kernel expression, grid, block, shared bytes, args)
    instead of run; yields (that list, the fake driver)."""
    from pyrms import driver

    calls = []
    with environment("device"):
        real_get = launch.get_kernel  # the environment's: a Kernel of handle 0xF00D, whatever the expression
        expressions = {}

        def get(source, expression, group, signature, device=None):
            kernel = real_get(source, expression, group, signature, device)
            expressions[id(kernel)] = expression
            return kernel

        def launch_kernel(self, grid, block, args, stream=None, shared_bytes=0, pdl=False):
            calls.append((expressions[id(self)], grid, block, shared_bytes, tuple(args)))

        monkeypatch.setattr(launch, "get_kernel", get)
        monkeypatch.setattr(launch.Kernel, "launch", launch_kernel)
        yield calls, driver._memory._cu  # the fake, as every driver module holds it (tests/support/fake_driver.py)
        monkeypatch.undo()


ROWS, HIDDEN = 4, 64  # arrays' shape


@pytest.fixture
def arrays(fake, names_only):
    """(fake, x, weight, bias, y): bfloat16 pyrms Tensors of [ROWS, HIDDEN] rows and [HIDDEN] vectors."""
    driver.set_device(0)
    x, y = (pyrms.Tensor.empty((ROWS, HIDDEN), "bfloat16") for _ in range(2))
    w, b = (pyrms.Tensor.empty((HIDDEN,), "bfloat16") for _ in range(2))
    yield fake, x, w, b, y
    for t in (x, w, b, y):
        t.close()

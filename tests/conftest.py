"""Shared test setup: the ``gpu`` marker skips, with the reason, where no CUDA driver or device exists."""
import functools

import pytest


@functools.lru_cache(maxsize=None)
def _no_gpu_reason():
    from pyrms import driver

    return driver.unavailable_reason()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = _no_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)

"""Kernels ready to launch, by (device, source, name expression): compiled, loaded and looked up once,
and kept in the Device (``Device.kernels``)."""
from __future__ import annotations

import threading

from . import compiler, driver, launch

_lock = threading.Lock()


def get(source: str, expression: str, group, signature: tuple[str, ...], device=None) -> launch.Kernel:
    """The kernel `expression` of `source` on `device` (default: the current one).

    `group` is every name expression compiled together with it (one NVRTC run, one cache entry);
    `signature` the argument kinds for packing ("ptr", "i32", "i64", "f32", ...).
    """
    dev = driver.current_device() if device is None else device
    key = (source, expression)
    kernel = dev.kernels.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = dev.kernels.get(key)
        if kernel is None:
            program = compiler.compile_source(source, arch=dev.arch, name_expressions=tuple(group))
            module = launch.load_module(program.cubin, dev)
            kernel = module.function(program.lowered_names[expression], signature)
            dev.kernels[key] = kernel
    return kernel

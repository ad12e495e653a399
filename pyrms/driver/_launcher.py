"""Kernel launches: ``launch_kernel`` (cuLaunchKernel, or cuLaunchKernelEx with programmatic
dependent launch), the PDL launch configuration, and the binding's launch call itself for the one
hot path that calls it directly. On the hot path a one-comparison success test comes first and only
a failure is handed to ``check``, which costs a few hundred nanoseconds even on success."""
from __future__ import annotations

import threading

from cuda.bindings import driver as _cu

from ..errors import check
from ._stream import stream_arg

_PDL = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def pdl_config(bx: int = 1, by: int = 1, bz: int = 1, shared_bytes: int = 0):
    """A ``CUlaunchConfig`` for cuLaunchKernelEx that allows programmatic dependent launch (PDL):
    the launch may start while the kernel before it on the stream still runs, once that kernel has
    executed ``griddepcontrol.launch_dependents`` (or exited), and the launched kernel's
    ``griddepcontrol.wait`` waits for that kernel to complete and its writes to be visible. A kernel
    launched so must wait before it reads anything the previous kernel writes.

    The block and dynamic shared bytes are set here, the grid to 1 x 1 x 1 and the stream to NULL;
    the caller sets what changes per launch (``gridDimX``, ``hStream``: an int handle or a CUstream).
    cuLaunchKernelEx only reads the config, so one thread may reuse it launch after launch, but
    two threads must not share one that either changes."""
    return launch_config((1, 1, 1), (bx, by, bz), shared_bytes, 0, True)


def launch_config(grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int, stream: int,
                  pdl: bool):
    """A complete ``CUlaunchConfig`` for cuLaunchKernelEx: ``grid`` and ``block`` (three ints each), the
    dynamic shared bytes, the stream (a raw handle) and, with ``pdl``, programmatic dependent launch
    allowed (pdl_config says what that means); without it, no attribute: a plain launch."""
    config = _cu.CUlaunchConfig()
    if pdl:
        attribute = _cu.CUlaunchAttribute()
        attribute.id = _PDL
        attribute.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attribute]  # copied into an array the config owns
        config.numAttrs = 1  # setting attrs leaves numAttrs at 0, and the driver reads numAttrs entries
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = stream
    return config


class _ThreadConfig(threading.local):
    """The calling thread's config for launch_kernel's PDL launches, made at its first one (the
    class default makes an unset one a plain read, as in _process._Selected)."""

    config = None


_thread_config = _ThreadConfig()


def raw_launch(pdl: bool = False):
    """The binding's launch call itself, for the hot paths that call it directly
    (``pyrms.launch.RowLaunch`` and ``pyrms.launch.BoundLaunch``: a Python frame less per launch), which pass
    its result to ``check``; everything else launches through ``launch_kernel``. Without ``pdl``:
    ``cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address, 0)``;
    with it: ``cuLaunchKernelEx(config, function, params_address, 0)``, ``config`` from pdl_config."""
    return _cu.cuLaunchKernelEx if pdl else _cu.cuLaunchKernel


def launch_kernel(function, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                  shared_bytes: int, stream, params_address: int, pdl: bool = False) -> None:
    """cuLaunchKernel with a packed ``void*[]`` at ``params_address``; with ``pdl``, cuLaunchKernelEx
    with programmatic dependent launch allowed (see pdl_config). The caller makes the function's
    context current."""
    if type(stream) is not int:
        stream = stream_arg(stream)
    if pdl:
        _launch_pdl(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address)
        return
    result = _cu.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address, 0)
    if result[0]:
        check(result, "cuLaunchKernel")


def _launch_pdl(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address) -> None:
    config = _thread_config.config
    if config is None:
        config = _thread_config.config = pdl_config()
    # Every field, since the thread's one config serves all its kernels.
    config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
    config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
    config.sharedMemBytes, config.hStream = shared_bytes, stream
    result = _cu.cuLaunchKernelEx(config, function, params_address, 0)
    if result[0]:
        check(result, "cuLaunchKernelEx")

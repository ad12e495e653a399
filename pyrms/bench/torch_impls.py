"""What the benchmark's PyTorch eager, torch.compile, Triton, Liger and FlashInfer implementations share; each op's own are
declared in its family's bench module (pyrms/ops/<family>/bench.py), built on these.

All launch on PyTorch's current stream, which the benchmark also uses for everything else (see
timing.py). PyTorch's functions have no ``out=``: the outputs PyTorch allocates are kept in a ring with one
slot per rotation set, so the caching allocator hands out a block last written ``sets`` calls ago,
and PyTorch's writes rotate through as much memory as pyrms's outputs do (not one L2-resident block).

torch.compile compiles per shape (``dynamic=False``, the fastest code inductor makes for a shape),
after ``torch._dynamo.reset()`` so earlier shapes count against no recompile limit; the compile is
warm-up, never timed. After it, ``error_on_recompile`` is set: a recompile during timing (say, on a
view's storage offset) fails the implementation instead of silently falling back to eager.
"""
from __future__ import annotations

import os
import time

from .impls import Unavailable


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def load_torch():
    """(torch, "") or (None, why not)."""
    # One kernel per compiled graph: compiling in-process beats starting a pool of compile workers.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install's OSError
        return None, f"PyTorch is not importable: {_one_line(exc)}"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device"
    return torch, ""


def load_triton(torch):
    """(triton, "") or (None, why not). Each op's Triton kernel is its own module, imported by its
    implementation (triton_kernel below)."""
    if torch is None:
        return None, "the Triton kernels take PyTorch tensors, and PyTorch is not available"
    try:
        import triton
    except Exception as exc:
        return None, f"Triton is not importable: {_one_line(exc)}"
    return triton, ""


def triton_kernel(ctx, module: str):
    """The module of an op's Triton kernel (it imports triton), or Unavailable saying why not."""
    import importlib

    if ctx.triton is None:
        raise Unavailable(ctx.triton_reason)
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise Unavailable(f"Triton is not importable: {_one_line(exc)}") from None


def liger_function(ctx, module: str, name: str):
    """Liger-Kernel's autograd function ``name`` of ``module`` (Liger-Kernel is optional: ``pip install
    liger-kernel``), or Unavailable saying why not."""
    import importlib

    need_torch(ctx)
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as exc:
        raise Unavailable(f"Liger-Kernel is not importable: {_one_line(exc)}") from None


FLASHINFER_EXT_NOTE = "FlashInfer's norm.cuh as built by tools/flashinfer_ext"


def flashinfer_function(ctx, name: str, notes: list | None = None):
    """``flashinfer.norm.<name>`` (FlashInfer is optional: ``pip install flashinfer-python``) where it takes
    ``enable_pdl=`` (so that each of its implementations launches as its name says); without the package, the
    same function of FlashInfer's norm.cuh built by tools/flashinfer_ext (pyrms.bench.flashinfer_ext), saying so
    in ``notes``; else Unavailable saying why not."""
    import inspect

    need_torch(ctx)
    try:
        from flashinfer import norm
    except Exception as exc:
        return _flashinfer_extension_function(ctx, name, f"FlashInfer is not importable: {_one_line(exc)}", notes)
    fn = getattr(norm, name, None)
    if fn is None:
        raise Unavailable(f"flashinfer.norm has no {name}")
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "enable_pdl" not in parameters:
        raise Unavailable(f"flashinfer.norm.{name} has no enable_pdl= keyword (an older FlashInfer)")
    return fn


def _flashinfer_extension_function(ctx, name: str, why_not_package: str, notes: list | None):
    from . import flashinfer_ext

    try:
        extension = flashinfer_ext.load(ctx.torch)
    except Exception as exc:
        raise Unavailable(f"{why_not_package}; nor is FlashInfer's norm.cuh built by tools/flashinfer_ext: "
                          f"{_one_line(exc)}") from None
    if notes is not None:
        notes.append(f"{FLASHINFER_EXT_NOTE} ({extension.path})")
    return getattr(extension, name)


def need_torch(ctx):
    """The torch module, or Unavailable saying why not."""
    if ctx.torch is None:
        raise Unavailable(ctx.torch_reason)
    return ctx.torch


def output_ptr(tensor) -> int:
    """The device address of a contiguous output PyTorch allocated."""
    if not tensor.is_contiguous():
        raise RuntimeError(f"output of shape {tuple(tensor.shape)} is not contiguous (strides {tensor.stride()})")
    return tensor.data_ptr()


def _set_config(config, name: str, value) -> None:
    if hasattr(config, name):
        setattr(config, name, value)


def compile_function(ctx, fn, example_args, notes):
    """torch.compile(fn) for this shape, compiled now by one call on ``example_args``."""
    torch = ctx.torch
    if not ctx.compile_here:
        raise Unavailable("torch.compile not run at this shape in --quick (each shape compiles for seconds)")
    dynamo = torch._dynamo
    dynamo.reset()
    _set_config(dynamo.config, "error_on_recompile", False)
    compiled = torch.compile(fn, dynamic=False, fullgraph=True)
    start = time.perf_counter()
    compiled(*example_args)
    torch.cuda.synchronize()
    notes.append(f"compiled in {time.perf_counter() - start:.1f} s (not timed)")
    _set_config(dynamo.config, "error_on_recompile", True)
    return compiled


def release_compile(ctx) -> None:
    if ctx.torch is not None:
        _set_config(ctx.torch._dynamo.config, "error_on_recompile", False)


class Compiled:
    """Mixin for a torch implementation whose ``wrap(fn, example_args)`` it overrides: torch.compile its
    function (compile time is not timed)."""

    name = "compile"

    def wrap(self, fn, example_args):
        return compile_function(self.ctx, fn, example_args, self.notes)

    def close(self):
        super().close()
        release_compile(self.ctx)

"""PyTorch eager, torch.compile and the Triton kernel as benchmark implementations.

All launch on PyTorch's current stream, which the benchmark also uses for everything else (see
timing.py). F.rms_norm has no ``out=``: the outputs PyTorch allocates are kept in a ring with one
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

from .impls import Impl, Unavailable


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
    """(pyrms.bench.triton_rms, "") or (None, why not)."""
    if torch is None:
        return None, "the Triton kernel takes PyTorch tensors, and PyTorch is not available"
    try:
        from . import triton_rms
    except Exception as exc:
        return None, f"Triton is not importable: {_one_line(exc)}"
    return triton_rms, ""


def _need_torch(ctx):
    if ctx.torch is None:
        raise Unavailable(ctx.torch_reason)
    return ctx.torch


def _ptr(tensor) -> int:
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


def _release_compile(ctx) -> None:
    if ctx.torch is not None:
        _set_config(ctx.torch._dynamo.config, "error_on_recompile", False)


class TorchForward(Impl):
    """torch.nn.functional.rms_norm(x, (hidden,), w, eps), eager."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = _need_torch(ctx)
        self.ctx = ctx
        self.x, self.w = p.torch_rows(torch, "x"), p.torch_weight(torch)
        self.ring = [None] * p.sets
        F, shape, eps = torch.nn.functional, (p.hidden,), ctx.epsilon

        def forward(x, w):
            return F.rms_norm(x, shape, w, eps)

        self.fn = self.wrap(forward, (self.x[0], self.w))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.ring[i] = self.fn(self.x[i], self.w)

    def results(self, i):
        return {"y": _ptr(self.ring[i])}

    def close(self):
        self.ring = []


class _Compiled:
    """Mixin for a torch implementation: torch.compile its function (compile time is not timed)."""

    name = "compile"

    def wrap(self, fn, example_args):
        return compile_function(self.ctx, fn, example_args, self.notes)

    def close(self):
        super().close()
        _release_compile(self.ctx)


class CompiledForward(_Compiled, TorchForward):
    """torch.compile of the same F.rms_norm call (inductor generates one Triton kernel)."""


class TritonForward(Impl):
    """The Triton kernel of triton_rms.py, writing into the benchmark's own output sets."""

    name = "triton"

    def __init__(self, ctx, p):
        super().__init__()
        torch = _need_torch(ctx)
        if ctx.triton is None:
            raise Unavailable(ctx.triton_reason)
        try:
            ctx.triton.launch_settings(p.hidden)
        except ValueError as exc:
            raise Unavailable(str(exc)) from None
        self.kernel, self.eps = ctx.triton.rms_norm, ctx.epsilon
        self.x, self.y, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "y"), p.torch_weight(torch)
        self.y_ptrs = p.ptrs("y")

    def launch(self, i):
        self.kernel(self.x[i], self.w, self.y[i], self.eps)

    def results(self, i):
        return {"y": self.y_ptrs[i]}


class TorchFusedAdd(Impl):
    """s = x + r; y = F.rms_norm(s): vLLM's fused_add_rms_norm written in PyTorch (out of place)."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = _need_torch(ctx)
        self.ctx = ctx
        self.x, self.r, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "r"), p.torch_weight(torch)
        self.ring = [None] * p.sets
        F, shape, eps = torch.nn.functional, (p.hidden,), ctx.epsilon

        def fused_add(x, r, w):
            s = x + r
            return F.rms_norm(s, shape, w, eps), s

        self.fn = self.wrap(fused_add, (self.x[0], self.r[0], self.w))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.ring[i] = self.fn(self.x[i], self.r[i], self.w)

    def results(self, i):
        y, s = self.ring[i]
        return {"y": _ptr(y), "r": _ptr(s)}

    def close(self):
        self.ring = []


class CompiledFusedAdd(_Compiled, TorchFusedAdd):
    """torch.compile of the PyTorch fused add."""


class TorchBackward(Impl):
    """dx, dγ of F.rms_norm through autograd: one forward per rotation set at setup (not timed), then
    ``torch.autograd.grad(y, (x, w), dy, retain_graph=True)`` per call runs the backward kernels only."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = _need_torch(ctx)
        self.torch = torch
        self.x = [v.detach().requires_grad_(True) for v in p.torch_rows(torch, "x")]
        self.w = p.torch_weight(torch).detach().requires_grad_(True)
        self.dy = p.torch_rows(torch, "dy")
        F, shape, eps = torch.nn.functional, (p.hidden,), ctx.epsilon
        with torch.enable_grad():
            self.y = [F.rms_norm(x, shape, self.w, eps) for x in self.x]
        self.ring = [None] * p.sets

    def launch(self, i):
        self.ring[i] = self.torch.autograd.grad(self.y[i], (self.x[i], self.w), self.dy[i], retain_graph=True)

    def results(self, i):
        dx, dw = self.ring[i]
        return {"dx": _ptr(dx), "dw": _ptr(dw)}

    def close(self):
        self.ring, self.y, self.x = [], [], []


FACTORIES = {
    ("rms_norm", "torch"): TorchForward,
    ("rms_norm", "compile"): CompiledForward,
    ("rms_norm", "triton"): TritonForward,
    ("fused_add_rms_norm", "torch"): TorchFusedAdd,
    ("fused_add_rms_norm", "compile"): CompiledFusedAdd,
    ("rms_norm_backward", "torch"): TorchBackward,
}

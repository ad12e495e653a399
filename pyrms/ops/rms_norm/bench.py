"""rms_norm's benchmark (pyrms.bench): the headline problem, its implementations (pyrms with and without
PDL, the seed kernel, PyTorch eager, torch.compile, the Triton kernel of bench_triton.py, Liger, FlashInfer
without and with PDL), its float64 reference, its calls in the host-time section, its example call for
tools/profile_launch.py and its host-time targets (its bandwidth, decode and floor targets, the headline op's, are
pyrms/bench/targets.json's).
Imports no PyTorch: the torch implementations get it from the benchmark's context."""
from __future__ import annotations

import inspect
import itertools

import pyrms

from ...bench import eager
from ...bench.impls import Context, Impl, Unavailable
from ...bench.ops import Bench, Targets
from ...bench.torch_impls import Compiled, flashinfer_function, liger_function, need_torch, output_ptr, triton_kernel
from ...tensor import Tensor
from .twin import rms_norm_ref


class PyrmsForward(Impl):
    name = "pyrms"

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.x, self.y = p.ptrs("x"), p.ptrs("y")
        self.args = (p.weight.ptr, ctx.epsilon, p.tokens, p.hidden)
        self.dtype, self.stream = p.dt.name, ctx.stream

    def launch(self, i):
        w, eps, tokens, hidden = self.args
        pyrms.rms_norm(self.y[i], self.x[i], w, eps, tokens, hidden, dtype=self.dtype, stream=self.stream)

    def results(self, i):
        return {"y": self.y[i]}


class PyrmsForwardNoPdl(PyrmsForward):
    """pyrms.rms_norm without programmatic dependent launch (pdl=False; the op's default is on):
    otherwise exactly the plain pyrms call."""

    name = "pyrms_nopdl"

    def __init__(self, ctx: Context, p):
        if "pdl" not in inspect.signature(pyrms.rms_norm).parameters:
            raise Unavailable(f"pyrms {pyrms.__version__}: rms_norm has no pdl= keyword")
        super().__init__(ctx, p)

    def launch(self, i):
        w, eps, tokens, hidden = self.args
        pyrms.rms_norm(self.y[i], self.x[i], w, eps, tokens, hidden, dtype=self.dtype, stream=self.stream, pdl=False)


class SeedForward(PyrmsForward):
    name = "seed"

    def __init__(self, ctx: Context, p):
        from ..seed import plan_seed

        try:
            plan_seed(p.dt, p.hidden)
        except ValueError as exc:
            raise Unavailable(f"seed kernel cannot launch: hidden/VEC > 1024 threads ({p.hidden} {p.dt.name})") from exc
        super().__init__(ctx, p)

    def launch(self, i):
        w, eps, tokens, hidden = self.args
        pyrms.seed_rms_norm(self.y[i], self.x[i], w, eps, tokens, hidden, dtype=self.dtype, stream=self.stream)


class TorchForward(Impl):
    """torch.nn.functional.rms_norm(x, (hidden,), w, eps), eager (pyrms.bench.eager). F.rms_norm has no
    ``out=``: the outputs are kept in a ring with one slot per rotation set (see pyrms.bench.torch_impls)."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.ctx = ctx
        self.x, self.w = p.torch_rows(torch, "x"), p.torch_weight(torch)
        self.ring = [None] * p.sets
        self.fn = self.wrap(eager.norm(torch, ctx.epsilon), (self.x[0], self.w))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.ring[i] = self.fn(self.x[i], self.w)

    def results(self, i):
        return {"y": output_ptr(self.ring[i])}

    def close(self):
        self.ring = []


class CompiledForward(Compiled, TorchForward):
    """torch.compile of the same F.rms_norm call (inductor generates one Triton kernel)."""


class LigerForward(TorchForward):
    """Liger-Kernel's LigerRMSNormFunction (casting mode "llama": Hugging Face's formula, pyrms's default
    rounding), forward only (no autograd graph is recorded: the inputs need no gradient)."""

    name = "liger"

    def wrap(self, fn, example_args):
        function = liger_function(self.ctx, "liger_kernel.ops.rms_norm", "LigerRMSNormFunction")
        eps = self.ctx.epsilon
        return lambda x, w: function.apply(x, w, eps, 0.0, "llama", False)


class TritonForward(Impl):
    """The Triton kernel of bench_triton.py, writing into the benchmark's own output sets."""

    name = "triton"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        kernel = triton_kernel(ctx, f"{__package__}.bench_triton")
        try:
            kernel.launch_settings(p.hidden)
        except ValueError as exc:
            raise Unavailable(str(exc)) from None
        self.kernel, self.eps = kernel.rms_norm, ctx.epsilon
        self.x, self.y, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "y"), p.torch_weight(torch)
        self.y_ptrs = p.ptrs("y")

    def launch(self, i):
        self.kernel(self.x[i], self.w, self.y[i], self.eps)

    def results(self, i):
        return {"y": self.y_ptrs[i]}


class FlashInferForward(Impl):
    """FlashInfer's ``rmsnorm(input, weight, eps, out=, enable_pdl=False)``, writing into the benchmark's own
    output sets (it rounds once, pyrms's round_once)."""

    name = "flashinfer"
    pdl = False

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.fn, self.eps = flashinfer_function(ctx, "rmsnorm", self.notes), ctx.epsilon
        self.x, self.y, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "y"), p.torch_weight(torch)
        self.y_ptrs = p.ptrs("y")

    def launch(self, i):
        self.fn(self.x[i], self.w, self.eps, out=self.y[i], enable_pdl=self.pdl)

    def results(self, i):
        return {"y": self.y_ptrs[i]}


class FlashInferForwardPdl(FlashInferForward):
    """The same with programmatic dependent launch (enable_pdl=True): set against pyrms with PDL."""

    name = "flashinfer_pdl"
    pdl = True


def reference(p, epsilon):
    return {"y": rms_norm_ref(p.host["x"], p.host_weight, epsilon)}, []


def host_call(h):
    """pyrms.rms_norm on raw ints."""
    y, x, w, epsilon, tokens, hidden, common = h.y, h.x, h.w, h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.rms_norm(y, x, w, epsilon, tokens, hidden, **common)


def host_extras(h, ctx):
    """pyrms.rms_norm on pyrms.Tensor and on torch tensors as they are; pyrms.torch.rms_norm; torch eager
    F.rms_norm."""
    variants, notes = {}, {}
    epsilon, stream, hidden = h.epsilon, h.stream, h.hidden
    tx, tw, ty = (Tensor(p, shape, h.dt, device=h.device) for p, shape in
                  ((h.x, (h.tokens, hidden)), (h.w, (hidden,)), (h.y, (h.tokens, hidden))))
    variants["rms_norm pyrms.Tensor"] = lambda: pyrms.rms_norm(ty, tx, tw, epsilon, stream=stream)
    # The raw-int call with out and input swapped at every call, so that no call repeats the one before it: every
    # call checked in full, as with a model's changing operands (a repeated call launches its bound launch).
    swapped = itertools.cycle(((h.y, h.x), (h.x, h.y))).__next__
    w, tokens, common = h.w, h.tokens, h.common
    variants["rms_norm alternating"] = lambda: pyrms.rms_norm(*swapped(), w, epsilon, tokens, hidden, **common)
    if ctx.torch is not None:
        torch = ctx.torch
        qx, qw, qy = (torch.from_dlpack(t) for t in (tx, tw, ty))  # views, no copy
        variants["rms_norm torch tensors"] = lambda: pyrms.rms_norm(qy, qx, qw, epsilon, stream=stream)
        try:
            import pyrms.torch as pt

            variants["pyrms.torch.rms_norm"] = lambda: pt.rms_norm(qx, qw, epsilon)
        except ImportError as exc:
            notes["pyrms_torch_reason"] = str(exc)
        F = torch.nn.functional
        variants["torch"] = lambda: F.rms_norm(qx, (hidden,), qw, epsilon)
    return variants, notes


def example(e):
    return lambda: pyrms.rms_norm(e.c, e.a, e.w, 1e-6, pdl=e.pdl)


RMS_NORM = Bench(
    "rms_norm", inputs=("x",), outputs=("y",), row_terms=2, vector_terms=1, results=("y",),
    formula="read x + read γ + write y = (2·T·H + H) elements",
    impls={"pyrms": PyrmsForward, "pyrms_nopdl": PyrmsForwardNoPdl, "seed": SeedForward, "torch": TorchForward,
           "compile": CompiledForward, "triton": TritonForward, "liger": LigerForward,
           "flashinfer": FlashInferForward, "flashinfer_pdl": FlashInferForwardPdl},
    reference=reference, aliases=("forward",), headline=True, host=host_call, host_extras=host_extras,
    host_labels={"pyrms": "pyrms.rms_norm on raw ints (validation + plan + launch)", "torch": "torch eager F.rms_norm"},
    example=example,
    targets=Targets(host=1.15, host_extras={"rms_norm pyrms.Tensor": 2.0, "rms_norm torch tensors": 2.0}))

BENCHES = (RMS_NORM,)

"""fused_add_rms_norm's benchmark (pyrms.bench): its problem (in place on x and the residual), its
implementations (pyrms with and without PDL, PyTorch eager, torch.compile, FlashInfer without and with PDL), its
float64 reference, its call in the host-time section, its example call for tools/profile_launch.py and its
targets. Imports no PyTorch."""
from __future__ import annotations

import numpy as np

import pyrms

from ...bench import eager
from ...bench.impls import Context, Impl, pyrms_function
from ...bench.ops import Bench, Targets
from ...bench.torch_impls import Compiled, flashinfer_function, need_torch, output_ptr
from .._row_twin import rms_ref


class PyrmsFusedAdd(Impl):
    """pyrms.fused_add_rms_norm(input, residual, weight, eps, num_tokens, hidden): in place, on pyrms Tensors
    (they carry dtype and shape, so a signature mismatch fails with pyrms's own message)."""

    name = "pyrms"
    pdl = True  # the op's default

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = pyrms_function("fused_add_rms_norm")
        self.p, self.x, self.r, self.w = p, p.tensors("x"), p.tensors("r"), p.weight_tensor()
        self.eps, self.stream = ctx.epsilon, ctx.stream

    def launch(self, i):
        self.fn(self.x[i], self.r[i], self.w, self.eps, self.p.tokens, self.p.hidden, stream=self.stream, pdl=self.pdl)

    def results(self, i):
        return {"y": self.p.ptr("x", i), "r": self.p.ptr("r", i)}


class PyrmsFusedAddNoPdl(PyrmsFusedAdd):
    """The same call with pdl=False: the figure set against the implementations that launch without PDL."""

    name = "pyrms_nopdl"
    pdl = False


class TorchFusedAdd(Impl):
    """s = x + r; y = RMSNorm(s): vLLM's fused add written in PyTorch, out of place (pyrms.bench.eager)."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.ctx = ctx
        self.x, self.r, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "r"), p.torch_weight(torch)
        self.ring = [None] * p.sets
        self.fn = self.wrap(eager.add_norm(torch, ctx.epsilon), (self.x[0], self.r[0], self.w))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.ring[i] = self.fn(self.x[i], self.r[i], self.w)

    def results(self, i):
        y, s = self.ring[i]
        return {"y": output_ptr(y), "r": output_ptr(s)}

    def close(self):
        self.ring = []


class CompiledFusedAdd(Compiled, TorchFusedAdd):
    """torch.compile of the PyTorch fused add."""


class FlashInferFusedAdd(Impl):
    """FlashInfer's ``fused_add_rmsnorm(input, residual, weight, eps, enable_pdl=False)``: in place on the
    benchmark's own sets, as pyrms's (its sum is normalized in fp32, pyrms's sum_precision="fp32")."""

    name = "flashinfer"
    pdl = False

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.fn = flashinfer_function(ctx, "fused_add_rmsnorm", self.notes)
        self.p, self.eps = p, ctx.epsilon
        self.x, self.r, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "r"), p.torch_weight(torch)

    def launch(self, i):
        self.fn(self.x[i], self.r[i], self.w, self.eps, enable_pdl=self.pdl)

    def results(self, i):
        return {"y": self.p.ptr("x", i), "r": self.p.ptr("r", i)}


class FlashInferFusedAddPdl(FlashInferFusedAdd):
    """The same with programmatic dependent launch (enable_pdl=True): set against pyrms with PDL."""

    name = "flashinfer_pdl"
    pdl = True


def fused_add_ref(x, r, w, epsilon, storage):
    """vLLM's fused_add_rms_norm: the sum rounded to the storage dtype, then normalized."""
    s = (np.asarray(x).astype(np.float64) + np.asarray(r).astype(np.float64)).astype(storage)
    return rms_ref(s, w, epsilon), s.astype(np.float64)


def reference(p, epsilon):
    y, s = fused_add_ref(p.host["x"], p.host["r"], p.host_weight, epsilon, p.dt.numpy)
    return {"y": y, "r": s}, []


def host_call(h):
    """pyrms.fused_add_rms_norm on raw ints."""
    x, r, w, epsilon, tokens, hidden, common = h.x, h.r, h.w, h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.fused_add_rms_norm(x, r, w, epsilon, tokens, hidden, **common)


def example(e):
    return lambda: pyrms.fused_add_rms_norm(e.a, e.b, e.w, 1e-6, pdl=e.pdl)


FUSED_ADD_RMS_NORM = Bench(
    "fused_add_rms_norm", inplace=("x", "r"), row_terms=4, vector_terms=1, results=("y", "r"),
    formula="read x, r, γ + write r, x = (4·T·H + H) elements",
    impls={"pyrms": PyrmsFusedAdd, "pyrms_nopdl": PyrmsFusedAddNoPdl, "torch": TorchFusedAdd,
           "compile": CompiledFusedAdd, "flashinfer": FlashInferFusedAdd, "flashinfer_pdl": FlashInferFusedAddPdl},
    reference=reference, aliases=("fused_add",), host=host_call, example=example,
    targets=Targets(ceiling=0.95, host=1.25))

BENCHES = (FUSED_ADD_RMS_NORM,)

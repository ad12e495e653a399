"""gated_rms_norm's benchmarks (pyrms.bench), forward and backward: their problems (x and the gate z read, y
written; dy, x and z read, dx, dz and dγ written; the default order, ``rmsnorm(x) * w * silu(z)`` over the whole
row, the output norm of Qwen3-Next's and FLA's gated DeltaNet layers), their implementations (pyrms with and without
PDL, the peer's formula in PyTorch eager and under torch.compile, the backward through autograd), their float64
references, their calls in the host-time section, the forward's example call for tools/profile_launch.py and their
targets. Imports no PyTorch."""
from __future__ import annotations

import pyrms

from ...bench.impls import Context, Impl, pyrms_function
from ...bench.ops import Bench, Targets
from ...bench.torch_impls import Compiled, compile_function, need_torch, output_ptr, release_compile
from ..rms_norm_backward.bench import DW_CHUNK_ROWS, DW_FULL_LIMIT
from .twin import gated_rms_norm_backward_ref, gated_rms_norm_ref


class PyrmsGated(Impl):
    """pyrms.gated_rms_norm(x, z, weight, eps, out=y) on pyrms Tensors."""

    name = "pyrms"
    pdl = True  # the op's default

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = pyrms_function("gated_rms_norm")
        self.p, self.x, self.z, self.y, self.w = p, p.tensors("x"), p.tensors("z"), p.tensors("y"), p.weight_tensor()
        self.eps, self.stream = ctx.epsilon, ctx.stream

    def launch(self, i):
        self.fn(self.x[i], self.z[i], self.w, self.eps, out=self.y[i], stream=self.stream, pdl=self.pdl)

    def results(self, i):
        return {"y": self.p.ptr("y", i)}


class PyrmsGatedNoPdl(PyrmsGated):
    """The same call with pdl=False: the figure set against the implementations that launch without PDL."""

    name = "pyrms_nopdl"
    pdl = False


def gated_formula(torch, eps: float):
    """mamba_ssm's reference formula (``rms_norm_ref`` with z, norm_before_gate=True) in PyTorch: fp32 inside,
    one rounding to x's dtype at the end."""
    silu = torch.nn.functional.silu

    def gated(x, z, w):
        xf = x.float()
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * w.float() * silu(z.float())
        return y.to(x.dtype)

    return gated


class TorchGated(Impl):
    """The peer's formula in PyTorch eager, out of place."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.ctx = ctx
        self.x, self.z, self.w = p.torch_rows(torch, "x"), p.torch_rows(torch, "z"), p.torch_weight(torch)
        self.ring = [None] * p.sets
        self.fn = self.wrap(gated_formula(torch, ctx.epsilon), (self.x[0], self.z[0], self.w))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.ring[i] = self.fn(self.x[i], self.z[i], self.w)

    def results(self, i):
        return {"y": output_ptr(self.ring[i])}

    def close(self):
        self.ring = []


class CompiledGated(Compiled, TorchGated):
    """torch.compile of the peer's formula (one fused kernel)."""


def reference(p, epsilon):
    return {"y": gated_rms_norm_ref(p.host["x"], p.host["z"], p.host_weight, epsilon)}, []


def host_call(h):
    """pyrms.gated_rms_norm on raw ints (z: the host operands' residual array, y the output)."""
    x, z, y, w, epsilon, tokens, hidden, common = h.x, h.r, h.y, h.w, h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.gated_rms_norm(x, z, w, epsilon, out=y, num_tokens=tokens, hidden_size=hidden, **common)


def example(e):
    return lambda: pyrms.gated_rms_norm(e.a, e.b, e.w, 1e-6, out=e.c, pdl=e.pdl)


GATED_RMS_NORM = Bench(
    "gated_rms_norm", inputs=("x", "z"), outputs=("y",), row_terms=3, vector_terms=1, results=("y",),
    formula="read x, z, γ + write y = (3·T·H + H) elements",
    impls={"pyrms": PyrmsGated, "pyrms_nopdl": PyrmsGatedNoPdl, "torch": TorchGated, "compile": CompiledGated},
    reference=reference, aliases=("gated",), host=host_call, example=example,
    targets=Targets(ceiling=0.90))



class PyrmsGatedBackward(Impl):
    """pyrms.gated_rms_norm_backward(dx, dz, dw, dy, x, z, weight, eps) on pyrms Tensors."""

    name = "pyrms"
    pdl = True  # the op's default

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = pyrms_function("gated_rms_norm_backward")
        self.p, self.w = p, p.weight_tensor()
        self.dx, self.dz, self.dw = p.tensors("dx"), p.tensors("dz"), p.tensors("dw")
        self.dy, self.x, self.z = p.tensors("dy"), p.tensors("x"), p.tensors("z")
        self.eps, self.stream = ctx.epsilon, ctx.stream

    def launch(self, i):
        self.fn(self.dx[i], self.dz[i], self.dw[i], self.dy[i], self.x[i], self.z[i], self.w, self.eps,
                stream=self.stream, pdl=self.pdl)

    def results(self, i):
        return {name: self.p.ptr(name, i) for name in ("dx", "dz", "dw")}


class PyrmsGatedBackwardNoPdl(PyrmsGatedBackward):
    """The same call with pdl=False."""

    name = "pyrms_nopdl"
    pdl = False


class TorchGatedBackward(Impl):
    """dx, dz, dγ of the peer's formula in PyTorch eager through autograd: one forward per rotation set at setup (not
    timed), then ``torch.autograd.grad(y, (x, z, w), dy, retain_graph=True)`` per call runs the backward only."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.torch, self.ctx = torch, ctx
        self.x = [v.detach().requires_grad_(True) for v in p.torch_rows(torch, "x")]
        self.z = [v.detach().requires_grad_(True) for v in p.torch_rows(torch, "z")]
        self.w = p.torch_weight(torch).detach().requires_grad_(True)
        self.dy = p.torch_rows(torch, "dy")
        forward = self.forward(torch, ctx.epsilon)
        with torch.enable_grad():
            self.y = [forward(x, z, self.w) for x, z in zip(self.x, self.z)]
        self.ring = [None] * p.sets

    def forward(self, torch, eps):
        """The forward whose graph the timed calls differentiate."""
        return gated_formula(torch, eps)

    def launch(self, i):
        self.ring[i] = self.torch.autograd.grad(self.y[i], (self.x[i], self.z[i], self.w), self.dy[i],
                                                retain_graph=True)

    def results(self, i):
        dx, dz, dw = self.ring[i]
        return {"dx": output_ptr(dx), "dz": output_ptr(dz), "dw": output_ptr(dw)}

    def close(self):
        self.ring, self.y, self.x, self.z = [], [], [], []


class CompiledGatedBackward(TorchGatedBackward):
    """dx, dz, dγ of torch.compile(fullgraph=True) of the peer's formula: inductor's backward kernel, timed as the
    eager one (the backward graph compiles at the warm-up calls, not timed)."""

    name = "compile"

    def forward(self, torch, eps):
        with torch.enable_grad():
            return compile_function(self.ctx, gated_formula(torch, eps), (self.x[0], self.z[0], self.w), self.notes)

    def close(self):
        super().close()
        release_compile(self.ctx)


def backward_reference(p, epsilon):
    """dx and dz on the validated rows; dγ over every row where tokens x hidden <= DW_FULL_LIMIT (the float64
    reference sums them on the host, DW_CHUNK_ROWS at a time)."""
    dx, dz, _ = gated_rms_norm_backward_ref(p.host["dy"], p.host["x"], p.host["z"], p.host_weight, epsilon)
    values, notes = {"dx": dx, "dz": dz}, []
    if p.tokens * p.hidden <= DW_FULL_LIMIT:
        dw = 0.0
        for first in range(0, p.tokens, DW_CHUNK_ROWS):
            rows = range(first, min(p.tokens, first + DW_CHUNK_ROWS))
            dw = dw + gated_rms_norm_backward_ref(*(p.download_rows(p.ptr(name, 0), rows) for name in ("dy", "x", "z")),
                                                  p.host_weight, epsilon)[2]
        values["dw"] = dw
    else:
        notes.append(f"dγ not validated: tokens x hidden > {DW_FULL_LIMIT}")
    return values, notes


def backward_host_call(h):
    """pyrms.gated_rms_norm_backward on raw ints (z: the host operands' y array, dz their residual array; dγ in the
    rows' dtype)."""
    gx, gz, gw, dy, x, z, w = h.gx, h.r, h.gw, h.dy, h.x, h.y, h.w
    epsilon, tokens, hidden, common = h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.gated_rms_norm_backward(gx, gz, gw, dy, x, z, w, epsilon, num_tokens=tokens,
                                                 hidden_size=hidden, **common)


GATED_RMS_NORM_BACKWARD = Bench(
    "gated_rms_norm_backward", inputs=("dy", "x", "z"), outputs=("dx", "dz"), vector_outputs=("dw",), row_terms=5,
    vector_terms=2, results=("dx", "dz", "dw"), formula="read dy, x, z, γ + write dx, dz, dγ = (5·T·H + 2·H) elements",
    impls={"pyrms": PyrmsGatedBackward, "pyrms_nopdl": PyrmsGatedBackwardNoPdl, "torch": TorchGatedBackward,
           "compile": CompiledGatedBackward},
    reference=backward_reference, aliases=("gated_backward",), host=backward_host_call,
    targets=Targets(ceiling=0.85))

BENCHES = (GATED_RMS_NORM, GATED_RMS_NORM_BACKWARD)

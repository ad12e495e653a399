"""gated_rms_norm's benchmark (pyrms.bench): its problem (x and the gate z read, y written; the default order,
``rmsnorm(x) * w * silu(z)`` over the whole row, the output norm of Qwen3-Next's and FLA's gated DeltaNet
layers), its implementations (pyrms with and without PDL, the peer's formula in PyTorch eager and under
torch.compile), its float64 reference, its call in the host-time section, its example call for
tools/profile_launch.py and its targets. Imports no PyTorch."""
from __future__ import annotations

import pyrms

from ...bench.impls import Context, Impl, pyrms_function
from ...bench.ops import Bench, Targets
from ...bench.torch_impls import Compiled, need_torch, output_ptr
from .twin import gated_rms_norm_ref


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

BENCHES = (GATED_RMS_NORM,)

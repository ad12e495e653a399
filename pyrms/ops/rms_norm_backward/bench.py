"""rms_norm_backward's benchmark (pyrms.bench): its problem (dx and dγ from dy and x), its implementations
(pyrms with and without PDL; through autograd: PyTorch's eager RMSNorm, torch.compile of Hugging Face's formula, Liger-Kernel's
function), its float64 reference, its call in the host-time section, its example call
for tools/profile_launch.py and its targets. Imports no PyTorch."""
from __future__ import annotations

import numpy as np

import pyrms

from ...bench import eager
from ...bench.impls import Context, Impl, pyrms_function
from ...bench.ops import Bench, Targets
from ...bench.torch_impls import compile_function, liger_function, need_torch, output_ptr, release_compile

DW_FULL_LIMIT = 1 << 27  # dγ sums over all rows: checked where tokens x hidden is at most this
DW_CHUNK_ROWS = 2048


class PyrmsBackward(Impl):
    """pyrms.rms_norm_backward(grad_input, grad_weight, grad_output, input, weight, eps, num_tokens, hidden,
    rstd=): with the rows' rstd that the forward saved (rms_norm's rstd=, run per rotation set at setup, not
    timed), as pyrms.torch's eager autograd runs it and as Liger's backward reads its forward's."""

    name = "pyrms"
    pdl = True  # the op's default

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = pyrms_function("rms_norm_backward")
        self.p, self.w = p, p.weight_tensor()
        self.dx, self.dw, self.dy, self.x = p.tensors("dx"), p.tensors("dw"), p.tensors("dy"), p.tensors("x")
        self.eps, self.stream = ctx.epsilon, ctx.stream
        self.rstd = [pyrms.Tensor.empty((p.tokens,), "float32") for _ in range(p.sets)]
        for i in range(p.sets):  # the forward, into dx (which the backward then overwrites)
            pyrms.rms_norm(self.dx[i], self.x[i], self.w, self.eps, rstd=self.rstd[i], stream=self.stream)

    def launch(self, i):
        self.fn(self.dx[i], self.dw[i], self.dy[i], self.x[i], self.w, self.eps, self.p.tokens, self.p.hidden,
                stream=self.stream, rstd=self.rstd[i], pdl=self.pdl)

    def close(self):
        for t in self.rstd:
            t.close()
        self.rstd = []

    def results(self, i):
        return {"dx": self.p.ptr("dx", i), "dw": self.p.ptr("dw", i)}


class PyrmsBackwardNoPdl(PyrmsBackward):
    """The same call with pdl=False: the figure set against the implementations that launch without PDL."""

    name = "pyrms_nopdl"
    pdl = False


class TorchBackward(Impl):
    """dx, dγ of PyTorch's eager RMSNorm (pyrms.bench.eager) through autograd: one forward per rotation set at
    setup (not timed), then ``torch.autograd.grad(y, (x, w), dy, retain_graph=True)`` per call runs the backward
    kernels only."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        self.torch, self.ctx = torch, ctx
        self.x = [v.detach().requires_grad_(True) for v in p.torch_rows(torch, "x")]
        self.w = p.torch_weight(torch).detach().requires_grad_(True)
        self.dy = p.torch_rows(torch, "dy")
        forward = self.forward(torch, p.hidden, ctx.epsilon)
        with torch.enable_grad():
            self.y = [forward(x, self.w) for x in self.x]
        self.ring = [None] * p.sets

    def forward(self, torch, hidden, eps):
        """The forward whose graph the timed calls differentiate."""
        return eager.norm(torch, eps)

    def launch(self, i):
        self.ring[i] = self.torch.autograd.grad(self.y[i], (self.x[i], self.w), self.dy[i], retain_graph=True)

    def results(self, i):
        dx, dw = self.ring[i]
        return {"dx": output_ptr(dx), "dw": output_ptr(dw)}

    def close(self):
        self.ring, self.y, self.x = [], [], []


class CompiledBackward(TorchBackward):
    """dx, dγ of torch.compile(fullgraph=True) of Hugging Face LLaMA's RMSNorm formula (pyrms's default
    rounding): inductor's backward kernel, timed as the eager one (the backward graph compiles at the warm-up
    calls, not timed)."""

    name = "compile"

    def forward(self, torch, hidden, eps):
        def hf(x, w):
            h = x.float()
            return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
        with torch.enable_grad():
            return compile_function(self.ctx, hf, (self.x[0], self.w), self.notes)

    def close(self):
        super().close()
        release_compile(self.ctx)


class LigerBackward(TorchBackward):
    """dx, dγ of Liger-Kernel's LigerRMSNormFunction (casting mode "llama": Hugging Face's formula; dx not
    written over dy), timed as the eager one; its forward saves the rows' rstd, which its backward reads."""

    name = "liger"

    def forward(self, torch, hidden, eps):
        function = liger_function(self.ctx, "liger_kernel.ops.rms_norm", "LigerRMSNormFunction")
        return lambda x, w: function.apply(x, w, eps, 0.0, "llama", False)


def _inv_rms(x64, epsilon):
    return 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))


def backward_dx_ref(dy, x, w, epsilon):
    """dx = r * (w*dy - x̂ * mean(x̂ * w*dy)), x̂ = x*r, r = (mean(x²)+eps)^-1/2 (docs/family.md)."""
    x64, dy64, w64 = (np.asarray(a).astype(np.float64) for a in (x, dy, w))
    r = _inv_rms(x64, epsilon)
    xhat = x64 * r
    g = dy64 * w64
    return r * (g - xhat * np.mean(xhat * g, axis=1, keepdims=True))


def backward_dw_partial(dy, x, epsilon):
    """Σ over the given rows of dy * x̂ (add the partials of all rows to get dγ)."""
    x64, dy64 = np.asarray(x).astype(np.float64), np.asarray(dy).astype(np.float64)
    return np.sum(dy64 * x64 * _inv_rms(x64, epsilon), axis=0)


def reference(p, epsilon):
    """dx on the validated rows; dγ over every row where tokens x hidden <= DW_FULL_LIMIT."""
    values, notes = {"dx": backward_dx_ref(p.host["dy"], p.host["x"], p.host_weight, epsilon)}, []
    if p.tokens * p.hidden <= DW_FULL_LIMIT:
        dw = np.zeros(p.hidden)
        for first in range(0, p.tokens, DW_CHUNK_ROWS):
            rows = range(first, min(p.tokens, first + DW_CHUNK_ROWS))
            dw += backward_dw_partial(p.download_rows(p.ptr("dy", 0), rows),
                                      p.download_rows(p.ptr("x", 0), rows), epsilon)
        values["dw"] = dw
    else:
        notes.append(f"dγ not validated: tokens x hidden > {DW_FULL_LIMIT} (the float64 "
                     "reference sums every row on the host)")
    return values, notes


def host_call(h):
    """pyrms.rms_norm_backward on raw ints, dγ in fp32."""
    gx, gw, dy, x, w = h.gx, h.gw, h.dy, h.x, h.w
    epsilon, tokens, hidden, common = h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.rms_norm_backward(gx, gw, dy, x, w, epsilon, tokens, hidden, grad_weight_dtype="float32",
                                           **common)


def example(e):
    return lambda: pyrms.rms_norm_backward(e.c, e.dw, e.b, e.a, e.w, 1e-6, pdl=e.pdl)


RMS_NORM_BACKWARD = Bench(
    "rms_norm_backward", inputs=("dy", "x"), outputs=("dx",), vector_outputs=("dw",), row_terms=3, vector_terms=2,
    results=("dx", "dw"), formula="read dy, x, γ + write dx, dγ = (3·T·H + 2·H) elements",
    impls={"pyrms": PyrmsBackward, "pyrms_nopdl": PyrmsBackwardNoPdl, "torch": TorchBackward, "compile": CompiledBackward, "liger": LigerBackward},
    reference=reference, aliases=("backward",),
    host=host_call, example=example,
    targets=Targets(ceiling=0.85, vs_eager=(32, 5120), host=1.25))

BENCHES = (RMS_NORM_BACKWARD,)

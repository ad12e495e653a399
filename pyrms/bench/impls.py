"""The benchmark's implementations of pyrms and the seed kernel, and what every implementation is:
a factory that, given a Problem, returns an Impl ready to launch on any rotation set, or raises
Unavailable saying why it cannot run (registry.make finds the factory of an (op, implementation)).

An Impl queues one call on rotation set i with ``launch(i)`` (on the benchmark's stream), and after
``launch(i)`` tells where its outputs are with ``results(i)`` (device pointers of contiguous arrays,
keyed like ops.OpSpec.results). PyTorch eager, torch.compile and Triton are in torch_impls, which
builds on this module (and this module does not import it).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import pyrms

from .. import dtypes


class Unavailable(Exception):
    """The implementation cannot run here or at this shape; the message says why (one line)."""


@dataclass
class Context:
    """What factories need besides the Problem."""

    stream: int                 # raw stream handle every implementation launches on
    epsilon: float
    torch: object = None        # the torch module, or None
    torch_reason: str = ""      # why torch is None
    triton: object = None       # pyrms.bench.triton_rms, or None
    triton_reason: str = ""
    compile_here: bool = True   # whether torch.compile runs at this shape (--quick limits it)
    notes: list = field(default_factory=list)


class Impl:
    name = "impl"

    def __init__(self):
        self.notes: list[str] = []

    def launch(self, i: int) -> None:
        raise NotImplementedError

    def results(self, i: int) -> dict[str, int]:
        raise NotImplementedError

    def close(self) -> None:
        pass


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
        from ..ops.seed import plan_seed

        try:
            plan_seed(p.dt, p.hidden)
        except ValueError as exc:
            raise Unavailable(f"seed kernel cannot launch: hidden/VEC > 1024 threads ({p.hidden} {p.dt.name})") from exc
        super().__init__(ctx, p)

    def launch(self, i):
        w, eps, tokens, hidden = self.args
        pyrms.seed_rms_norm(self.y[i], self.x[i], w, eps, tokens, hidden, dtype=self.dtype, stream=self.stream)


def _pyrms_function(name: str):
    fn = getattr(pyrms, name, None)
    if fn is None:
        raise Unavailable(f"pyrms {pyrms.__version__} has no {name}")
    return fn


class PyrmsFusedAdd(Impl):
    """pyrms.fused_add_rms_norm(input, residual, weight, eps, num_tokens, hidden): in place, on pyrms Tensors
    (they carry dtype and shape, so a signature mismatch fails with pyrms's own message)."""

    name = "pyrms"

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = _pyrms_function("fused_add_rms_norm")
        self.p, self.x, self.r, self.w = p, p.tensors("x"), p.tensors("r"), p.weight_tensor()
        self.eps, self.stream = ctx.epsilon, ctx.stream

    def launch(self, i):
        self.fn(self.x[i], self.r[i], self.w, self.eps, self.p.tokens, self.p.hidden, stream=self.stream)

    def results(self, i):
        return {"y": self.p.ptr("x", i), "r": self.p.ptr("r", i)}


class PyrmsBackward(Impl):
    """pyrms.rms_norm_backward(grad_input, grad_weight, grad_output, input, weight, eps, num_tokens, hidden)."""

    name = "pyrms"

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = _pyrms_function("rms_norm_backward")
        self.p, self.w = p, p.weight_tensor()
        self.dx, self.dw, self.dy, self.x = p.tensors("dx"), p.tensors("dw"), p.tensors("dy"), p.tensors("x")
        self.eps, self.stream = ctx.epsilon, ctx.stream

    def launch(self, i):
        self.fn(self.dx[i], self.dw[i], self.dy[i], self.x[i], self.w, self.eps, self.p.tokens, self.p.hidden,
                stream=self.stream)

    def results(self, i):
        return {"dx": self.p.ptr("dx", i), "dw": self.p.ptr("dw", i)}


def torch_dtype(torch, dt: dtypes.DType):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dt.name]

"""qk_norm_rope's benchmark (pyrms.bench): its problem, fused QKV rows [tokens, hidden] rewritten in place, of
heads of HEAD_DIM with Qwen3-32B's GQA ratio (KV_GROUP q heads to each kv head: hidden 10240 is Qwen3-32B's 64
q and 8 kv heads), the rotation by each token's position in a Qwen3-like cos/sin cache; its implementations
(pyrms with and without PDL, and the unfused sequence vLLM runs otherwise, eager and torch.compile) and its
float64 reference. Its own shapes are not in the default run's: ``--ops qk_norm_rope --shapes 1x10240,...``
times Qwen3-32B's (the default extra-op shapes of hidden 5120 are 32 q and 4 kv heads). Imports no PyTorch."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import driver
from ...bench import eager
from ...bench.impls import Context, Impl, Unavailable, pyrms_function
from ...bench.ops import Bench
from ...bench.torch_impls import Compiled, need_torch
from .twin import qk_norm_rope_ref, rope_cache

HEAD_DIM = 128
KV_GROUP = 8  # q heads per kv head (Qwen3-32B: 64 / 8)
MAX_POSITION = 32768  # rows of the cos/sin cache; token t is at position t % MAX_POSITION
ROPE_THETA = 1e6  # Qwen3's rope base


def heads(hidden: int) -> tuple[int, int]:
    """(q heads, kv heads) of fused QKV rows of ``hidden`` elements; Unavailable where hidden is not a whole
    number of KV_GROUP + 2 heads of HEAD_DIM."""
    group = (KV_GROUP + 2) * HEAD_DIM
    if hidden % group:
        raise Unavailable(f"qk_norm_rope's rows are fused QKV of {HEAD_DIM}-element heads, {KV_GROUP} q heads to "
                          f"each kv head: hidden must be a multiple of {group} (Qwen3-32B: 10240), got {hidden}")
    return KV_GROUP * (hidden // group), hidden // group


def positions(tokens: int) -> np.ndarray:
    """Each token's position: int64 [tokens]."""
    return np.arange(tokens, dtype=np.int64) % MAX_POSITION


@dataclass(frozen=True)
class QkBench(Bench):
    """Its bytes: each call reads and writes the q and k heads, KV_GROUP + 1 of every KV_GROUP + 2 heads of a
    row, and reads the two [HEAD_DIM] weights (the positions and the cos/sin rows, fp32, are not counted)."""

    def elements_moved(self, tokens: int, hidden: int) -> int:
        return 2 * tokens * (hidden // (KV_GROUP + 2) * (KV_GROUP + 1)) + 2 * HEAD_DIM


class PyrmsQkNormRope(Impl):
    """pyrms.qk_norm_rope on raw pointers, in place on the set's rows; the weights are the first two HEAD_DIM
    slices of the problem's weight."""

    name = "pyrms"
    pdl = True  # the op's default

    def __init__(self, ctx: Context, p):
        super().__init__()
        self.fn = pyrms_function("qk_norm_rope")
        self.nq, self.nkv = heads(p.hidden)
        self.p, self.eps, self.stream = p, ctx.epsilon, ctx.stream
        self.qw, self.kw = p.weight.ptr, p.weight.ptr + HEAD_DIM * p.dt.itemsize
        table, pos = rope_cache(MAX_POSITION, HEAD_DIM, ROPE_THETA), positions(p.tokens)
        self.cache, self.positions = driver.DeviceBuffer(table.nbytes), driver.DeviceBuffer(pos.nbytes)
        driver.memcpy_htod(self.cache.ptr, table)
        driver.memcpy_htod(self.positions.ptr, pos)

    def launch(self, i):
        self.fn(self.p.ptr("qkv", i), self.qw, self.kw, self.cache.ptr, self.positions.ptr, num_q_heads=self.nq,
                num_kv_heads=self.nkv, head_dim=HEAD_DIM, epsilon=self.eps, num_tokens=self.p.tokens,
                dtype=self.p.dt.name, stream=self.stream, pdl=self.pdl)

    def results(self, i):
        return {"qkv": self.p.ptr("qkv", i)}

    def close(self):
        self.cache.close()
        self.positions.close()


class PyrmsQkNormRopeNoPdl(PyrmsQkNormRope):
    """The same call with pdl=False: the figure set against the implementations that launch without PDL."""

    name = "pyrms_nopdl"
    pdl = False


class TorchQkNormRope(Impl):
    """The unfused sequence in PyTorch (pyrms.bench.eager.qk_norm_rope): each head's F.rms_norm, the NeoX
    rotation of RotaryEmbedding.forward_native, copied back into the set's rows."""

    name = "torch"

    def __init__(self, ctx, p):
        super().__init__()
        torch = need_torch(ctx)
        nq, nkv = heads(p.hidden)
        self.ctx, self.p = ctx, p
        self.rows = p.torch_rows(torch, "qkv")
        weight = p.torch_weight(torch)
        device = self.rows[0].device
        self.args = (weight[:HEAD_DIM], weight[HEAD_DIM:2 * HEAD_DIM],
                     torch.from_numpy(rope_cache(MAX_POSITION, HEAD_DIM, ROPE_THETA)).to(device),
                     torch.from_numpy(positions(p.tokens)).to(device))
        self.fn = self.wrap(eager.qk_norm_rope(torch, ctx.epsilon, nq, nkv, HEAD_DIM), (self.rows[0], *self.args))

    def wrap(self, fn, example_args):
        return fn

    def launch(self, i):
        self.fn(self.rows[i], *self.args)

    def results(self, i):
        return {"qkv": self.p.ptr("qkv", i)}

    def close(self):
        self.args = ()


class CompiledQkNormRope(Compiled, TorchQkNormRope):
    """torch.compile of the unfused sequence."""


def reference(p, epsilon):
    """float64: qk_norm_rope_ref of the validated rows (their tokens' positions); nothing where the rows are not
    fused QKV of whole heads (every implementation then says why)."""
    try:
        nq, nkv = heads(p.hidden)
    except Unavailable as exc:
        return {}, [str(exc)]
    w = p.host_weight
    rows = np.asarray(p.rows)
    out = qk_norm_rope_ref(p.host["qkv"], w[:HEAD_DIM], w[HEAD_DIM:2 * HEAD_DIM],
                           rope_cache(MAX_POSITION, HEAD_DIM, ROPE_THETA), positions(p.tokens)[rows],
                           num_q_heads=nq, num_kv_heads=nkv, head_dim=HEAD_DIM, epsilon=epsilon)
    return {"qkv": out}, []


QK_NORM_ROPE = QkBench(
    "qk_norm_rope", inplace=("qkv",), results=("qkv",),
    formula=f"read + write the q and k heads, read q_weight, k_weight = (2·T·H·{KV_GROUP + 1}/{KV_GROUP + 2} + "
            f"2·{HEAD_DIM}) elements",
    impls={"pyrms": PyrmsQkNormRope, "pyrms_nopdl": PyrmsQkNormRopeNoPdl, "torch": TorchQkNormRope,
           "compile": CompiledQkNormRope},
    reference=reference, aliases=("qk_norm",))

BENCHES = (QK_NORM_ROPE,)

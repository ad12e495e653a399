"""qk_norm_rope's benchmark declaration without a GPU: the problem's heads from the row width, its bytes, its
float64 reference (the rows the validation samples, at their tokens' positions), the PDL choice of its pyrms
implementations and the unfused PyTorch sequence against the twin (where PyTorch is installed)."""
import types

import numpy as np
import pytest

from pyrms import dtypes
from pyrms.bench import ops
from pyrms.bench.impls import Unavailable
from pyrms.ops.qk_norm_rope import bench as qk_bench
from pyrms.ops.qk_norm_rope.twin import qk_norm_rope_twin, rope_cache


def test_heads_follow_qwen3_32bs_ratio():
    assert qk_bench.heads(10240) == (64, 8) and qk_bench.heads(5120) == (32, 4) and qk_bench.heads(1280) == (8, 1)
    with pytest.raises(Unavailable, match="hidden must be a multiple of 1280 \\(Qwen3-32B: 10240\\), got 4096"):
        qk_bench.heads(4096)
    assert ops.get("qk_norm_rope") is qk_bench.QK_NORM_ROPE and ops.aliases()["qk_norm"] == "qk_norm_rope"
    assert qk_bench.QK_NORM_ROPE.arrays == ("qkv",)


def problem(rng, tokens, hidden, rows):
    dt = dtypes.FLOAT32
    qkv = rng.uniform(-2, 2, (tokens, hidden)).astype(np.float32)
    weight = rng.uniform(-1, 1, hidden).astype(np.float32)
    return qkv, types.SimpleNamespace(dt=dt, tokens=tokens, hidden=hidden, rows=rows, host={"qkv": qkv[rows]},
                                      host_weight=weight)


def test_reference_is_the_op_at_each_sampled_tokens_position(rng):
    """The validated rows (not the first tokens only) at their own positions: the twin's values within fp32's
    error; v untouched; another position's rotation would not be."""
    qkv, p = problem(rng, 9, 1280, [0, 4, 8])
    values, notes = qk_bench.reference(p, 1e-6)
    table = rope_cache(qk_bench.MAX_POSITION, 128, qk_bench.ROPE_THETA)
    twin = qk_norm_rope_twin(qkv, p.host_weight[:128], p.host_weight[128:256], table, qk_bench.positions(9),
                             num_q_heads=8, num_kv_heads=1, head_dim=128, epsilon=1e-6)
    assert notes == [] and set(values) == {"qkv"} and values["qkv"].shape == (3, 1280)
    np.testing.assert_allclose(values["qkv"], twin[[0, 4, 8]], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(values["qkv"][:, 9 * 128:], qkv[[0, 4, 8], 9 * 128:])
    assert not np.allclose(values["qkv"][1], twin[5], atol=1e-2)


def test_reference_of_rows_that_are_not_whole_heads_says_why(rng):
    _, p = problem(rng, 2, 1024, [0, 1])
    values, notes = qk_bench.reference(p, 1e-6)
    assert values == {} and "hidden must be a multiple of 1280" in notes[0]


def test_pyrms_nopdl_launches_with_pdl_false(monkeypatch):
    calls = []

    def init(self, ctx, p):  # the operands' set-up needs a GPU; the call's keywords are what is checked
        self.fn = lambda *args, **kwargs: calls.append(kwargs)
        self.p = types.SimpleNamespace(tokens=1, hidden=1280, dt=dtypes.BFLOAT16, ptr=lambda name, i: 1 << 20)
        self.nq, self.nkv, self.qw, self.kw, self.eps, self.stream = 8, 1, 0, 0, 1e-6, 0
        self.cache = self.positions = types.SimpleNamespace(ptr=0)

    monkeypatch.setattr(qk_bench.PyrmsQkNormRope, "__init__", init)
    for name in ("pyrms", "pyrms_nopdl"):
        ops.get("qk_norm_rope").impls[name](None, None).launch(0)
    assert [(k["pdl"], k["num_q_heads"], k["num_kv_heads"], k["head_dim"]) for k in calls] == [(True, 8, 1, 128),
                                                                                               (False, 8, 1, 128)]


def test_the_unfused_torch_sequence_is_the_op():
    """pyrms.bench.eager.qk_norm_rope on CPU float32 tensors: the twin's values within fp32's error, v and the
    padding untouched, in place."""
    torch = pytest.importorskip("torch")
    from pyrms.bench import eager

    rng = np.random.default_rng(0)
    qkv = rng.uniform(-2, 2, (5, 1280 + 16)).astype(np.float32)
    weight = rng.uniform(-1, 1, 256).astype(np.float32)
    table, pos = rope_cache(64, 128, 1e6), np.array([0, 3, 63, 7, 1])
    want = qk_norm_rope_twin(qkv, weight[:128], weight[128:], table, pos, num_q_heads=8, num_kv_heads=1,
                             head_dim=128, epsilon=1e-6)
    buffer = torch.from_numpy(qkv.copy())
    out = eager.qk_norm_rope(torch, 1e-6, 8, 1, 128)(buffer[:, :1280], torch.from_numpy(weight[:128]),
                                                      torch.from_numpy(weight[128:]), torch.from_numpy(table),
                                                      torch.from_numpy(pos))
    assert out.data_ptr() == buffer.data_ptr()
    np.testing.assert_allclose(buffer.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(buffer.numpy()[:, 9 * 128:], qkv[:, 9 * 128:])

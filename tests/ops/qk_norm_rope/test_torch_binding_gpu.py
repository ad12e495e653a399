"""pyrms.torch.qk_norm_rope on the GPU: eagerly and under torch.compile(fullgraph=True) (the custom op
torch.ops.pyrms.qk_norm_rope, mutating qkv), the twin's bits on a strided view of a wider QKV buffer; its fake
refuses bad shapes; autograd is refused by name."""
import numpy as np
import pytest

from pyrms.ops.qk_norm_rope.twin import qk_norm_rope_twin
from tests.ops.qk_norm_rope.cases import rope_cache

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pt = pytest.importorskip("pyrms.torch")

NQ, NKV, HEAD_DIM = 8, 2, 128
WIDTH = (NQ + 2 * NKV) * HEAD_DIM


def _operands(tokens, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(tokens)
    buffer = torch.randn(tokens, WIDTH + 32, generator=gen).to(dtype).cuda()
    qw = (torch.rand(HEAD_DIM, generator=gen) + 0.5).to(dtype).cuda()
    kw = (torch.rand(HEAD_DIM, generator=gen) + 0.5).to(dtype).cuda()
    cache = torch.from_numpy(rope_cache(64, 64)).cuda()
    positions = torch.randint(0, 64, (tokens,), generator=gen).cuda()
    return buffer, qw, kw, cache, positions


def _numpy(t):
    """A bf16 tensor's values as ml_dtypes.bfloat16 (numpy has no bfloat16 of its own)."""
    import ml_dtypes

    return t.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _want(buffer, qw, kw, cache, positions, **options):
    return qk_norm_rope_twin(_numpy(buffer), _numpy(qw), _numpy(kw), cache.cpu().numpy(), positions.cpu().numpy(),
                             num_q_heads=NQ, num_kv_heads=NKV, head_dim=HEAD_DIM, rotary_dim=64, **options)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("is_neox", [True, False])
def test_eager_and_compiled_are_the_twins_bits(compiled, is_neox):
    buffer, qw, kw, cache, positions = _operands(77)
    want = _want(buffer, qw, kw, cache, positions, is_neox=is_neox, gemma=True)

    def step(buffer, qw, kw, cache, positions):
        pt.qk_norm_rope(buffer[:, :WIDTH], qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                        head_dim=HEAD_DIM, is_neox=is_neox, gemma=True)
        return buffer.sum()

    fn = torch.compile(step, fullgraph=True) if compiled else step
    with torch.inference_mode():
        fn(buffer, qw, kw, cache, positions)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buffer.cpu().view(torch.int16).numpy().view(np.uint16), want.view(np.uint16))


def test_the_fake_checks_shapes():
    """On meta tensors (the fake implementation): a good call passes, a short positions is refused by name."""
    buffer, qw, kw, cache, positions = (t.to("meta") for t in _operands(4))
    op = torch.ops.pyrms.qk_norm_rope.default
    op(buffer[:, :WIDTH], qw, kw, cache, positions, NQ, NKV, HEAD_DIM, 64, True, 1e-6, False)
    with pytest.raises(ValueError, match="positions must be an int64 \\[4\\] tensor"):
        op(buffer[:, :WIDTH], qw, kw, cache, positions[:3], NQ, NKV, HEAD_DIM, 64, True, 1e-6, False)


def test_autograd_is_refused():
    buffer, qw, kw, cache, positions = _operands(2)
    qw.requires_grad_(True)
    with pytest.raises(RuntimeError, match="qk_norm_rope works in place and has no backward"):
        pt.qk_norm_rope(buffer[:, :WIDTH], qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                        head_dim=HEAD_DIM)

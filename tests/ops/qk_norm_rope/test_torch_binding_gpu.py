"""pyrms.torch.qk_norm_rope on the GPU: eagerly and under torch.compile(fullgraph=True) (the custom op
torch.ops.pyrms.qk_norm_rope, mutating qkv), the twin's bits on a strided view of a wider QKV buffer; its fake
refuses bad shapes; autograd is refused by name."""
import numpy as np
import pytest

from pyrms.ops.qk_norm_rope.twin import qk_norm_rope_twin, rope_cache

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


def _caches(tokens, fp8, gen, blocks=4, block_size=16):
    """Guard-filled [blocks, block_size, NKV, HEAD_DIM] caches (bf16 7.0, or fp8 as vLLM's torch.uint8 0x5A), a
    slot_mapping of distinct slots with padding (-1) every third token."""
    if fp8:
        make = lambda: torch.full((blocks, block_size, NKV, HEAD_DIM), 0x5A, dtype=torch.uint8).cuda()  # noqa: E731
    else:
        make = lambda: torch.full((blocks, block_size, NKV, HEAD_DIM), 7.0, dtype=torch.bfloat16).cuda()  # noqa: E731
    slots = torch.randperm(blocks * block_size, generator=gen)[:tokens]
    slots[1::3] = -1
    return make(), make(), slots.cuda()


def _cache_want(want, key_cache, value_cache, slots, fp8, k_scale, v_scale):
    from pyrms import dtypes
    from pyrms.ops.qk_norm_rope.twin import kv_cache_twin

    as_np = (lambda t: t.cpu().numpy().view(dtypes.FLOAT8_E4M3FN.numpy)) if fp8 else _numpy  # noqa: E731
    return kv_cache_twin(want, as_np(key_cache), as_np(value_cache), slots.cpu().numpy(), num_q_heads=NQ,
                         num_kv_heads=NKV, head_dim=HEAD_DIM, kv_cache_dtype="fp8" if fp8 else "auto",
                         k_scale=k_scale, v_scale=v_scale)


def _bits(t):
    return t.cpu().view(torch.uint8 if t.element_size() == 1 else torch.int16).numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("fp8", [False, True])
def test_kv_cache_eager_and_compiled_are_the_twins_bits(compiled, fp8):
    """The caches written beside qkv, eagerly and as the custom op (mutating qkv and both caches), the scales a
    tensor (k) and a float (v): the twins' bits in qkv and in the whole caches (untouched slots keep their fill)."""
    buffer, qw, kw, cache, positions = _operands(45)
    key_cache, value_cache, slots = _caches(45, fp8, torch.Generator().manual_seed(3))
    k_scale = torch.tensor([0.02]).cuda()
    want = _want(buffer, qw, kw, cache, positions, is_neox=True)
    want_k, want_v = _cache_want(want, key_cache, value_cache, slots, fp8, 0.02, 0.01)

    def step(buffer, qw, kw, cache, positions, key_cache, value_cache, slots, k_scale):
        pt.qk_norm_rope(buffer[:, :WIDTH], qw, kw, cache, positions, num_q_heads=NQ, num_kv_heads=NKV,
                        head_dim=HEAD_DIM, key_cache=key_cache, value_cache=value_cache, slot_mapping=slots,
                        kv_cache_dtype="fp8" if fp8 else "auto", k_scale=k_scale, v_scale=0.01)
        return key_cache.float().sum() if not fp8 else buffer.sum()

    fn = torch.compile(step, fullgraph=True) if compiled else step
    with torch.inference_mode():
        fn(buffer, qw, kw, cache, positions, key_cache, value_cache, slots, k_scale)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buffer.cpu().view(torch.int16).numpy().view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(_bits(key_cache), want_k.view(_bits(key_cache).dtype))
    np.testing.assert_array_equal(_bits(value_cache), want_v.view(_bits(value_cache).dtype))


def test_the_fake_checks_the_caches():
    """On meta tensors: caches of qkv's dtype pass, a cache of another shape or an int32 slot_mapping is refused
    by name."""
    buffer, qw, kw, cache, positions = (t.to("meta") for t in _operands(4))
    key_cache, value_cache, slots = (t.to("meta") for t in _caches(4, False, torch.Generator().manual_seed(0)))
    op = torch.ops.pyrms.qk_norm_rope_kv_cache.default
    head = (buffer[:, :WIDTH], qw, kw, cache, positions, NQ, NKV, HEAD_DIM, 64, True, 1e-6, False)
    op(*head, key_cache, value_cache, slots, "auto", None, None, 1.0, 1.0)
    with pytest.raises(ValueError, match="value_cache must be a \\[num_blocks, block_size, 2, 128\\] tensor"):
        op(*head, key_cache, value_cache[:, :, :1], slots, "auto", None, None, 1.0, 1.0)
    with pytest.raises(ValueError, match="slot_mapping must be an int64 \\[4\\] tensor"):
        op(*head, key_cache, value_cache, slots.to(torch.int32), "auto", None, None, 1.0, 1.0)

"""pyrms.torch.qk_norm_rope without a GPU: which custom op a call traces to (the plain one, or the one that
mutates the caches too), that both trace under torch.compile's own machinery (make_fx on fake tensors), and the
refusals of cache arguments without caches and of caches given in part."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import pyrms.torch as pt  # noqa: E402

NQ, NKV, HEAD_DIM, TOKENS = 4, 1, 64, 3
WIDTH = (NQ + 2 * NKV) * HEAD_DIM


def operands():
    qkv = torch.randn(TOKENS, WIDTH).to(torch.bfloat16)
    w = torch.ones(HEAD_DIM, dtype=torch.bfloat16)
    return qkv, w, w.clone(), torch.randn(16, 32), torch.zeros(TOKENS, dtype=torch.int64)


def caches():
    cache = torch.zeros(2, 4, NKV, HEAD_DIM, dtype=torch.bfloat16)
    return cache, cache.clone(), torch.arange(TOKENS, dtype=torch.int64)


def test_without_caches_the_plain_op_with_them_the_cache_op():
    def plain(qkv, qw, kw, cos_sin, positions):
        pt.qk_norm_rope(qkv, qw, kw, cos_sin, positions, num_q_heads=NQ, num_kv_heads=NKV, head_dim=HEAD_DIM)
        return qkv

    def cached(qkv, qw, kw, cos_sin, positions, key_cache, value_cache, slots):
        pt.qk_norm_rope(qkv, qw, kw, cos_sin, positions, num_q_heads=NQ, num_kv_heads=NKV, head_dim=HEAD_DIM,
                        key_cache=key_cache, value_cache=value_cache, slot_mapping=slots, v_scale=0.5)
        return qkv, key_cache, value_cache

    code = make_fx(plain, tracing_mode="fake")(*operands()).code
    assert "torch.ops.pyrms.qk_norm_rope.default(" in code and "kv_cache" not in code
    code = make_fx(cached, tracing_mode="fake")(*operands(), *caches()).code
    assert "torch.ops.pyrms.qk_norm_rope_kv_cache.default(" in code
    assert "'auto', None, None, 1.0, 0.5)" in code


def test_cache_arguments_need_every_cache_and_apply_only_with_them():
    qkv, qw, kw, cos_sin, positions = operands()
    key_cache, value_cache, slots = caches()
    common = dict(num_q_heads=NQ, num_kv_heads=NKV, head_dim=HEAD_DIM)
    with pytest.raises(ValueError, match="key_cache, value_cache and slot_mapping go together; got only key_cache, "
                                         "slot_mapping"):
        pt.qk_norm_rope(qkv, qw, kw, cos_sin, positions, key_cache=key_cache, slot_mapping=slots, **common)
    with pytest.raises(ValueError, match="kv_cache_dtype applies with key_cache, value_cache and slot_mapping only, "
                                         "got kv_cache_dtype='fp8' and no caches"):
        pt.qk_norm_rope(qkv, qw, kw, cos_sin, positions, kv_cache_dtype="fp8", **common)
    with pytest.raises(ValueError, match="k_scale applies with key_cache, value_cache and slot_mapping only"):
        pt.qk_norm_rope(qkv, qw, kw, cos_sin, positions, k_scale=0.5, **common)

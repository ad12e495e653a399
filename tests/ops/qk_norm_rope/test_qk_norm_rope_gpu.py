"""pyrms.qk_norm_rope on the GPU: bitwise equality with the twin (qk_norm_rope_twin) over every element phase of
qkv, misaligned weights, cos_sin_cache and positions, strided tokens, NeoX and GPT-J, partial rotary dims, Gemma's
1 + w, NaN/inf heads, bf16, fp16 and fp32, 1 to 4096 tokens, head_dim 64 to 256 and Qwen3-like head counts; v's
heads, the gaps between tokens, the guards and every input checked untouched (tests.support.testing's guarded
operands and run_checked). Also: the heads at position 0 are pyrms.rms_norm's round-once rows (the family's
tree), a token's result does not depend on the batch, and arrays (pyrms Tensors, torch) launch what pointers do."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops.qk_norm_rope.twin import qk_norm_rope_twin, rope_cache
from tests.support import case_matrix
from tests.support.hostile_cases import FakeArray
from tests.ops.qk_norm_rope.cases import check_qk_norm_rope
from tests.support.testing import allocate, check_case, closing, guarded

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]


def on_device(values: np.ndarray):
    """A guarded [rows, n] operand holding ``values`` (a cos_sin_cache table, or positions as one row)."""
    values = np.atleast_2d(values)
    operand = guarded(values.dtype, values.shape[0], values.shape[1], 0, None, 0)
    operand.set_values(values)
    operand.upload()
    return operand


@pytest.mark.parametrize("dtype", DTYPES)
def test_case_matrix(rng, dtype):
    """The sanitizer sweep's cases (tests.support.case_matrix): every phase of qkv at head_dim 64, 82, 128 and 256,
    each other pointer misaligned, a strided qkv with specials, partial rotary dims, Gemma, 1 to 300 tokens."""
    cases = [c for c in case_matrix.sanitize("qk_norm_rope") if c.dtype == dtype]
    assert cases
    for c in cases:
        check_case(rng, c)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("is_neox", [True, False])
def test_token_counts(rng, dtype, head_dim, is_neox):
    """1 to 4096 tokens: one block of heads or many, a last block part full; aligned (the ALIGNED kernel) and not."""
    for tokens in (1, 2, 5, 31, 128, 129, 1000, 4096):
        check_qk_norm_rope(rng, dtype, tokens, head_dim, is_neox=is_neox, epsilon=1e-6)
    check_qk_norm_rope(rng, dtype, 4096, head_dim, is_neox=is_neox, offsets={"qkv": 1})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("is_neox", [True, False])
def test_qwen3_like_heads(rng, dtype, is_neox):
    """64 q and 8 kv heads of 128 (Qwen3-32B), Gemma's weights, a strided view of a wider buffer."""
    for tokens, offsets, strides in ((1, {}, {}), (7, {"qkv": 3}, {"qkv": 80 * 128 + 5}), (1024, {}, {"qkv": 80 * 128 + 8})):
        check_qk_norm_rope(rng, dtype, tokens, 128, num_q_heads=64, num_kv_heads=8, offsets=offsets, strides=strides,
                           gemma=True, is_neox=is_neox)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("head_dim, rot", [(128, 64), (128, 32), (128, 96), (128, 24), (64, 16), (256, 64), (80, 40)])
def test_partial_rotary(rng, dtype, is_neox, head_dim, rot):
    """Dims from rotary_dim on pass through normalized; rotary_dim / 2 whole vectors (the ALIGNED kernel's vector
    partners) or not (element by element), aligned and misaligned."""
    for off in (0, 1, 5):
        check_qk_norm_rope(rng, dtype, 9, head_dim, rotary_dim=rot, is_neox=is_neox, offsets={"qkv": off})


@pytest.mark.parametrize("dtype", DTYPES)
def test_position_zero_is_rms_norms_round_once_row(rng, dtype):
    """At position 0 (cos 1, sin 0) the heads are exactly pyrms.rms_norm's with round_once on the same heads (the
    N-D path's packed rows): one reduction tree for the family."""
    dt = dtypes.get(dtype)
    tokens, nq, nkv, head_dim = 37, 4, 2, 128
    width = (nq + 2 * nkv) * head_dim
    src = allocate(rng, dt, tokens, width, misalign=1)
    w = allocate(rng, dt, 1, head_dim, low=0.5, high=1.5)
    cache = on_device(rope_cache(4, head_dim))
    positions = on_device(np.zeros(tokens, np.int64))
    out = allocate(rng, dt, tokens, width, misalign=1, poison=True)
    with closing(src, w, cache, positions, out):
        pyrms.rms_norm(out.ptr, src.ptr, w.ptr, 1e-6, (tokens, nq + nkv), head_dim, dtype=dt,
                       input_stride=(width, head_dim), out_stride=(width, head_dim), round_once=True)
        pyrms.qk_norm_rope(src.ptr, w.ptr, w.ptr, cache.ptr, positions.ptr, num_q_heads=nq, num_kv_heads=nkv,
                           head_dim=head_dim, num_tokens=tokens, dtype=dt)
        driver.synchronize()
        heads = slice(0, (nq + nkv) * head_dim)
        got, want = src.device_values()[:, heads], out.device_values()[:, heads]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_tokens_result_does_not_depend_on_the_batch(rng):
    """Token t alone and inside 300 tokens (other heads per block, other blocks): the same bits."""
    dt, nq, nkv, head_dim = dtypes.BFLOAT16, 8, 2, 128
    width = (nq + 2 * nkv) * head_dim
    many = allocate(rng, dt, 300, width)
    one = allocate(rng, dt, 1, width)
    one.set_values(many.values()[123:124])
    one.upload()
    w = allocate(rng, dt, 1, head_dim)
    cache = on_device(rope_cache(64, head_dim))
    pos = rng.integers(0, 64, 300)
    positions = on_device(pos)
    position = on_device(pos[123:124])
    with closing(many, one, w, cache, positions, position):
        for x, p, n in ((many, positions, 300), (one, position, 1)):
            pyrms.qk_norm_rope(x.ptr, w.ptr, w.ptr, cache.ptr, p.ptr, num_q_heads=nq, num_kv_heads=nkv,
                               head_dim=head_dim, num_tokens=n, is_neox=False)
        driver.synchronize()
        np.testing.assert_array_equal(many.device_values()[123].view(np.uint16), one.device_values()[0].view(np.uint16))


def test_pyrms_tensors_and_array_interfaces(rng):
    """qkv as a 3-D [tokens, heads, head_dim] pyrms Tensor view with a token stride, weights as Tensors, the cache
    and the positions through __cuda_array_interface__: the twin's bits."""
    dt, tokens, nq, nkv, head_dim, rot = dtypes.BFLOAT16, 9, 4, 2, 64, 32
    heads = nq + 2 * nkv
    stride = heads * head_dim + 16
    x = allocate(rng, dt, tokens, heads * head_dim, stride=stride)
    qw, kw = allocate(rng, dt, 1, head_dim), allocate(rng, dt, 1, head_dim)
    table = rope_cache(50, rot)
    cache = on_device(table)
    pos = rng.integers(0, 50, tokens)
    positions = on_device(pos)
    want = qk_norm_rope_twin(x.values(), qw.values()[0], kw.values()[0], table, pos, num_q_heads=nq,
                             num_kv_heads=nkv, head_dim=head_dim, rotary_dim=rot)
    with closing(x, qw, kw, cache, positions):
        qkv = pyrms.Tensor(x.ptr, (tokens, heads, head_dim), dt, (stride, head_dim, 1), 0)
        pyrms.qk_norm_rope(qkv, pyrms.Tensor(qw.ptr, (head_dim,), dt), pyrms.Tensor(kw.ptr, (head_dim,), dt),
                           FakeArray(cache.ptr, (50, rot), "<f4"), FakeArray(positions.ptr, (tokens,), "<i8"),
                           num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim)
        driver.synchronize()
        np.testing.assert_array_equal(x.device_values().view(np.uint16), want.view(np.uint16))


def test_torch_tensors():
    """A strided torch view of a wider QKV buffer, torch weights, cache and int64 positions: the twin's bits, the
    padding after each token untouched."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    gen = torch.Generator().manual_seed(0)
    tokens, nq, nkv, head_dim = 33, 16, 4, 128
    width = (nq + 2 * nkv) * head_dim
    buffer = torch.randn(tokens, width + 64, generator=gen).to(torch.bfloat16).cuda()
    qkv = buffer[:, :width]
    qw = (torch.rand(head_dim, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    kw = (torch.rand(head_dim, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    cache = torch.from_numpy(rope_cache(100, head_dim)).cuda()
    positions = torch.randint(0, 100, (tokens,), generator=gen).cuda()
    before = buffer.cpu().view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
    want = qk_norm_rope_twin(before, qw.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16),
                             kw.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16), cache.cpu().numpy(),
                             positions.cpu().numpy(), num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim, gemma=True)
    pyrms.qk_norm_rope(qkv, qw, kw, cache, positions, num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim,
                       gemma=True, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    got = buffer.cpu().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(got, want.view(np.uint16))


# --- the paged KV cache (kv_cache) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
@pytest.mark.parametrize("layout", ["nhd", "padded", "hnd"])
def test_kv_cache_token_counts(rng, dtype, kv_cache_dtype, layout):
    """1 to 2048 tokens into guard-filled caches of each layout (every slot not written, every stride's gap and
    every padding token's slot keeps its guard), aligned (the ALIGNED kernel) and not, scales as values and on the
    device: the twins' bits in qkv and both caches."""
    for tokens in (1, 2, 31, 129, 2048):
        check_qk_norm_rope(rng, dtype, tokens, 128, kv_cache=True, kv_cache_dtype=kv_cache_dtype,
                           cache_layout=layout, device_scale=tokens % 2 == 1)
    check_qk_norm_rope(rng, dtype, 300, 128, offsets={"qkv": 1, "key_cache": 5, "value_cache": 3},
                       kv_cache=True, kv_cache_dtype=kv_cache_dtype, cache_layout=layout, is_neox=False)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_kv_cache_qwen3_like_heads(rng, dtype, kv_cache_dtype):
    """64 q and 8 kv heads of 128 (Qwen3-32B) in a strided QKV, Gemma's weights, into padded and HND caches."""
    for tokens, offsets, strides, layout in ((1, {}, {}, "nhd"), (7, {"qkv": 3}, {"qkv": 80 * 128 + 5}, "padded"),
                                             (1024, {}, {"qkv": 80 * 128 + 8}, "hnd")):
        check_qk_norm_rope(rng, dtype, tokens, 128, num_q_heads=64, num_kv_heads=8, offsets=offsets, strides=strides,
                           gemma=True, kv_cache=True, kv_cache_dtype=kv_cache_dtype, cache_layout=layout,
                           device_scale=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_cache_heads_with_a_tail_and_partial_rotary(rng, dtype):
    """head_dim 82 (a tail) and 64 with rotary_dim 16, every phase of qkv, both cache dtypes and specials."""
    for off in range(dtypes.get(dtype).vec_elems):
        for kv_cache_dtype in ("auto", "fp8"):
            check_qk_norm_rope(rng, dtype, 9, 82, offsets={"qkv": off}, kv_cache=True, kv_cache_dtype=kv_cache_dtype,
                               cache_layout="padded", specials=True)
            check_qk_norm_rope(rng, dtype, 9, 64, rotary_dim=16, offsets={"qkv": off}, kv_cache=True,
                               kv_cache_dtype=kv_cache_dtype)


def test_kv_cache_torch_tensors():
    """vLLM's tensors: a strided QKV view, fp8 caches as torch.uint8 (vLLM's fp8 storage) and as
    torch.float8_e4m3fn, HND strides through a permuted view, int64 slot_mapping with padding (-1), one-element
    float32 scales: the twins' bits; qkv's q and k as without the cache."""
    torch = pytest.importorskip("torch")
    import ml_dtypes
    from pyrms.ops.qk_norm_rope.twin import kv_cache_twin

    def as_bf16(t):
        return t.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)

    gen = torch.Generator().manual_seed(1)
    tokens, nq, nkv, head_dim, blocks, block_size = 40, 16, 4, 128, 6, 8
    width = (nq + 2 * nkv) * head_dim
    buffer = torch.randn(tokens, width + 64, generator=gen).to(torch.bfloat16).cuda()
    qkv = buffer[:, :width]
    qw = (torch.rand(head_dim, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    kw = (torch.rand(head_dim, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    cache = torch.from_numpy(rope_cache(100, head_dim)).cuda()
    positions = torch.randint(0, 100, (tokens,), generator=gen).cuda()
    slots = torch.randperm(blocks * block_size, generator=gen)[:tokens]
    slots[::5] = -1
    slot_mapping = slots.cuda()
    k_scale, v_scale = torch.tensor([0.02]).cuda(), torch.tensor([0.01]).cuda()
    before = as_bf16(buffer)
    want = qk_norm_rope_twin(before, as_bf16(qw), as_bf16(kw), cache.cpu().numpy(), positions.cpu().numpy(),
                             num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim)
    fp8 = dtypes.FLOAT8_E4M3FN.numpy
    key_u8 = torch.full((blocks, block_size, nkv, head_dim), 0x5A, dtype=torch.uint8).cuda()
    value_hnd = torch.full((blocks, nkv, block_size, head_dim), 0x5A, dtype=torch.uint8).cuda()
    value_f8 = value_hnd.view(torch.float8_e4m3fn).permute(0, 2, 1, 3)  # [blocks, block_size, nkv, head_dim], HND
    value_u8 = value_hnd.permute(0, 2, 1, 3)
    want_k, want_v = kv_cache_twin(want, key_u8.cpu().numpy().view(fp8), value_u8.cpu().numpy().view(fp8),
                                   slots.numpy(), num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim,
                                   kv_cache_dtype="fp8", k_scale=0.02, v_scale=0.01)
    for value_cache in (value_u8, value_f8):
        buffer.copy_(torch.from_numpy(before.view(np.int16)).view(torch.bfloat16).cuda())
        key_u8.fill_(0x5A)
        value_hnd.fill_(0x5A)
        with pytest.raises(ValueError, match="must have one shape and strides"):  # vLLM's caches share a layout
            pyrms.qk_norm_rope(qkv, qw, kw, cache, positions, num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim,
                               key_cache=key_u8, value_cache=value_cache, slot_mapping=slot_mapping,
                               kv_cache_dtype="fp8", k_scale=k_scale, v_scale=v_scale)
        key_hnd = torch.full((blocks, nkv, block_size, head_dim), 0x5A, dtype=torch.uint8).cuda()
        key_cache = key_hnd.permute(0, 2, 1, 3)
        pyrms.qk_norm_rope(qkv, qw, kw, cache, positions, num_q_heads=nq, num_kv_heads=nkv, head_dim=head_dim,
                           key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                           kv_cache_dtype="fp8", k_scale=k_scale, v_scale=v_scale, stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        np.testing.assert_array_equal(buffer.cpu().view(torch.int16).numpy().view(np.uint16), want.view(np.uint16))
        np.testing.assert_array_equal(key_cache.cpu().numpy(), want_k.view(np.uint8))
        np.testing.assert_array_equal(value_u8.cpu().numpy(), want_v.view(np.uint8))

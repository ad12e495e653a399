"""pyrms.torch.gated_rms_norm on the GPU: eagerly and under torch.compile(fullgraph=True) (the custom op
torch.ops.pyrms.gated_rms_norm), the twin's bits on a strided x, both orders, groups, an fp32 weight and none; its
fake refuses bad shapes; the gradients (pyrms's backward kernel, torch.ops.pyrms.gated_rms_norm_backward) the
backward twin's bits and within rounding of float64 autograd, eager and compiled; opcheck of both ops."""
import numpy as np
import pytest

from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_backward_twin, gated_rms_norm_twin

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pt = pytest.importorskip("pyrms.torch")

HIDDEN = 1024


def _operands(rows, dtype=torch.bfloat16, weight_dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, HIDDEN + 24, generator=gen).to(dtype).cuda()[:, :HIDDEN]  # a strided view
    z = (4 * torch.randn(rows, HIDDEN, generator=gen)).to(dtype).cuda()
    w = None if weight_dtype is None else (torch.rand(HIDDEN, generator=gen) + 0.5).to(weight_dtype).cuda()
    return x, z, w


def _numpy(t):
    """A tensor's values as numpy (bf16 as ml_dtypes.bfloat16: numpy has no bfloat16 of its own)."""
    if t.dtype != torch.bfloat16:
        return t.cpu().contiguous().numpy()
    import ml_dtypes

    return t.cpu().contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("group_size, weight_dtype", [(None, torch.bfloat16), (128, torch.float32), (256, None)])
def test_eager_and_compiled_are_the_twins_bits(compiled, norm_before_gate, group_size, weight_dtype):
    x, z, w = _operands(77, weight_dtype=weight_dtype)
    want = gated_rms_norm_twin(_numpy(x), _numpy(z), None if w is None else _numpy(w), 1e-5, group_size=group_size,
                               norm_before_gate=norm_before_gate)

    def step(x, z, w):
        return pt.gated_rms_norm(x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)

    fn = torch.compile(step, fullgraph=True) if compiled else step
    with torch.inference_mode():
        got = fn(x, z, w)
    torch.cuda.synchronize()
    assert got.shape == x.shape and got.dtype == x.dtype and got.is_contiguous()
    np.testing.assert_array_equal(_numpy(got).view(np.uint16), want.view(np.uint16))


def test_the_fake_checks_shapes():
    """On meta tensors (the fake implementation): a good call passes, a z of another shape and a group size that
    does not divide the row are refused by name."""
    x, z, w = (t.to("meta") for t in _operands(4))
    op = torch.ops.pyrms.gated_rms_norm.default
    assert op(x, z, w, 1e-6, 256, True).shape == x.shape
    with pytest.raises(ValueError, match="z has shape \\(3, 1024\\), but x has \\(4, 1024\\)"):
        op(x, z[:3], w, 1e-6, None, True)
    with pytest.raises(ValueError, match="hidden_size=1024 is not a multiple of group_size=1000"):
        op(x, z, w, 1e-6, 1000, True)


def _formula64(x, z, w, eps, group_size, norm_before_gate):
    """mamba_ssm's rmsnorm_fn (no bias) in torch float64: the gradients' reference, through torch's autograd."""
    silu = z * torch.sigmoid(z)
    v = x if norm_before_gate else x * silu
    gs = group_size or v.shape[-1]
    g = v.reshape(*v.shape[:-1], -1, gs)
    y = (g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)).reshape(v.shape)
    y = y if w is None else y * w
    return y * silu if norm_before_gate else y


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("group_size, weight_dtype", [(None, torch.float32), (128, torch.bfloat16), (256, None)])
def test_gradients_are_the_formulas(compiled, norm_before_gate, group_size, weight_dtype):
    """x, z and the weight's gradients (pyrms's backward kernel) the backward twin's bits, and within bf16's
    rounding of float64 autograd through the peer's formula, eagerly and compiled; each gradient in its input's
    dtype; the forward under autograd is the eager forward's bits."""
    x, z, w = _operands(33, weight_dtype=weight_dtype)
    with torch.inference_mode():
        forward = pt.gated_rms_norm(x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)
    leaves = [t.detach().requires_grad_(True) for t in (x, z, w) if t is not None]
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(5)).to(x.dtype).cuda()

    def step(x, z, w=None):
        return pt.gated_rms_norm(x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)

    fn = torch.compile(step, fullgraph=True) if compiled else step
    y = fn(*leaves)
    assert torch.equal(y.detach(), forward)
    got = torch.autograd.grad(y, leaves, dy)
    leaves64 = [t.detach().double().requires_grad_(True) for t in leaves]
    want = torch.autograd.grad(_formula64(*leaves64[:2], leaves64[2] if w is not None else None, 1e-5, group_size,
                                          norm_before_gate), leaves64, dy.double())
    for leaf, g, g64 in zip(leaves, got, want):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape
        torch.testing.assert_close(g.double(), g64, rtol=2 ** -7, atol=2 ** -7 * g64.abs().max().item())
    twin = gated_rms_norm_backward_twin(_numpy(dy), _numpy(x), _numpy(z), None if w is None else _numpy(w), 1e-5,
                                        group_size=group_size, norm_before_gate=norm_before_gate)
    for g, t in zip(got, twin):
        np.testing.assert_array_equal(_numpy(g).view(np.uint8), np.asarray(t).view(np.uint8))


@pytest.mark.parametrize("norm_before_gate, group_size, weight_dtype", [(True, None, torch.bfloat16),
                                                                        (False, 128, torch.float32),
                                                                        (False, 256, None)])
def test_opcheck(norm_before_gate, group_size, weight_dtype):
    """torch.library.opcheck: the schema, the fake against the real op, the autograd registration, and the op under
    AOT dispatch with dynamic shapes."""
    x, z, w = _operands(5, weight_dtype=weight_dtype)
    leaves = [None if t is None else t.contiguous().requires_grad_() for t in (x, z, w)]
    torch.library.opcheck(torch.ops.pyrms.gated_rms_norm.default, (*leaves, 1e-6, group_size, norm_before_gate))


@pytest.mark.parametrize("norm_before_gate, group_size, weight_dtype", [(True, None, torch.bfloat16),
                                                                        (False, 128, torch.float32),
                                                                        (True, 256, None)])
def test_backward_opcheck(norm_before_gate, group_size, weight_dtype):
    """torch.library.opcheck of the backward's custom op: schema, fake against real (the empty grad_weight without a
    weight), and AOT dispatch with dynamic shapes."""
    x, z, w = _operands(6, weight_dtype=weight_dtype)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(x.dtype).cuda()
    torch.library.opcheck(torch.ops.pyrms.gated_rms_norm_backward.default,
                          (dy, x.contiguous(), z, w, 1e-6, group_size, norm_before_gate))

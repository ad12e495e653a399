"""pyrms.torch.gated_rms_norm on the GPU: eagerly and under torch.compile(fullgraph=True) (the custom op
torch.ops.pyrms.gated_rms_norm), the twin's bits on a strided x, both orders, groups, an fp32 weight and none; its
fake refuses bad shapes; a recorded call's backward raises NotImplementedError by name."""
import numpy as np
import pytest

from pyrms.ops.gated_rms_norm.twin import gated_rms_norm_twin

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


def test_backward_is_refused_by_name():
    """Under autograd the forward runs (the custom op) and gives the eager bits; backward raises."""
    x, z, w = _operands(3)
    with torch.inference_mode():
        eager = pt.gated_rms_norm(x, z, w)
    x = x.detach().requires_grad_(True)
    y = pt.gated_rms_norm(x, z, w)
    assert torch.equal(y.detach(), eager)
    with pytest.raises(NotImplementedError, match="gated_rms_norm has no backward yet"):
        y.sum().backward()

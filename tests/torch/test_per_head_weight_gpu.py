"""pyrms.torch.rms_norm with a weight per head ([heads, head_dim] beside x [..., heads, head_dim]): forward and
gradients bitwise what separate calls per head give (each head's rows with its weight row), in every dtype
pair, on contiguous tensors and on a fused QKV projection's slice; compiled and eager agree; opcheck; the
shape error names both accepted shapes.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, randn, same_bits  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

HEADS, HEAD_DIM = 6, 72  # 72: not a multiple of 16 bytes in every dtype, so heads start at every phase


def layout(gen, name, x_dtype):
    """x [2, 9, HEADS, HEAD_DIM]: contiguous, or the q part of a fused QKV projection (rows HEADS + 4 heads apart)."""
    if name == "contiguous":
        return randn(gen, 2, 9, HEADS, HEAD_DIM, dtype=x_dtype)
    qkv = randn(gen, 2, 9, (HEADS + 4) * HEAD_DIM, dtype=x_dtype)
    return qkv[..., :HEADS * HEAD_DIM].view(2, 9, HEADS, HEAD_DIM)


def per_head_reference(x, w, **kw):
    """The same norm as HEADS separate calls, each head's rows (a strided view) with its weight row."""
    return torch.stack([pt.rms_norm(x[..., h, :], w[h], 1e-6, **kw) for h in range(HEADS)], dim=-2)


CASES = {  # name -> (x dtype, weight dtype, keywords)
    "bf16": (BF16, BF16, {}),
    "fp16 gemma round_once": (FP16, FP16, {"gemma": True, "round_once": True}),
    "fp32": (FP32, FP32, {}),
    "bf16 fp32 weight": (BF16, FP32, {}),
    "fp16 fp32 weight round_once": (FP16, FP32, {"round_once": True}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("where", ["contiguous", "qkv slice"])
def test_forward_and_grads_are_separate_calls_per_head(gen, case, where):
    x_dtype, w_dtype, kw = CASES[case]
    x0 = layout(gen, where, x_dtype)
    w0 = randn(gen, HEADS, HEAD_DIM, dtype=w_dtype, scale=0.3, mean=0 if kw.get("gemma") else 1)
    x, w = x0.detach().requires_grad_(), w0.clone().requires_grad_()
    xr, wr = x0.detach().requires_grad_(), w0.clone().requires_grad_()
    y, y_ref = pt.rms_norm(x, w, 1e-6, **kw), per_head_reference(xr, wr, **kw)
    same_bits(y, y_ref.detach(), "y")
    grad = randn(gen, *y.shape, dtype=y.dtype)
    y.backward(grad)
    y_ref.backward(grad)
    same_bits(x.grad, xr.grad, "dx")
    same_bits(w.grad, wr.grad, "dweight")
    assert w.grad.dtype == w_dtype


def test_compile_fullgraph_matches_eager(gen, dynamo):
    x0, w0 = layout(gen, "qkv slice", BF16), randn(gen, HEADS, HEAD_DIM, dtype=FP32, mean=1)

    def step(x, w):
        return (pt.rms_norm(x, w, 1e-6).float() ** 2).sum()

    eager = [x0.detach().requires_grad_(), w0.clone().requires_grad_()]
    comp = [x0.detach().requires_grad_(), w0.clone().requires_grad_()]
    step(*eager).backward()
    torch.compile(step, fullgraph=True)(*comp).backward()
    same_bits(comp[0].grad, eager[0].grad, "dx")
    same_bits(comp[1].grad, eager[1].grad, "dweight")


@pytest.mark.parametrize("w_dtype", [BF16, FP32])
def test_opcheck(gen, w_dtype):
    x, w = randn(gen, 3, HEADS, HEAD_DIM), randn(gen, HEADS, HEAD_DIM, dtype=w_dtype)
    g = randn(gen, 3, HEADS, HEAD_DIM)
    torch.library.opcheck(torch.ops.pyrms.rms_norm.default,
                          (x.clone().requires_grad_(), w.clone().requires_grad_(), 1e-6, False, False))
    torch.library.opcheck(torch.ops.pyrms.rms_norm_backward.default, (g, x, w, 1e-6, False))


def test_a_weight_of_neither_shape_is_refused(gen):
    x = randn(gen, 3, HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match=rf"weight has shape \({HEADS + 1}, {HEAD_DIM}\), expected \({HEAD_DIM},\) "
                                         rf"or \({HEADS}, {HEAD_DIM}\), one per head"):
        pt.rms_norm(x, randn(gen, HEADS + 1, HEAD_DIM), 1e-6)

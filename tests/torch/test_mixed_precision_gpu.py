"""pyrms.torch with fp32 master weights beside bf16/fp16 activations (the set-up of HF Trainer, QuACK and
Megatron under ``torch.autocast``), and the other pairs of dtypes a weight and x may have: the output's
dtype is the formula's (the default rounding: float32, the promotion in Hugging Face's
``weight * x_hat.to(x.dtype)``; round_once: x's, as Gemma's ``.to(x.dtype)``), the weight is read exactly,
and the gradients match float64 autograd of the exact formula, each in its parameter's dtype; opcheck,
torch.compile(fullgraph=True) and a small model under autocast.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, TOL, close, randn  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

# (x's dtype, the weight's): fp32 master weights beside 2-byte activations, and the other mixed pairs
PAIRS = [(BF16, FP32), (FP16, FP32), (FP32, BF16), (FP16, BF16)]


def exact_rms(x, w, eps, gemma=False):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1 + w if gemma else w)


@pytest.mark.parametrize("x_dtype, w_dtype", PAIRS)
@pytest.mark.parametrize("gemma, round_once", [(False, False), (True, True), (False, True)])
def test_rms_norm_output_dtype_and_value(gen, x_dtype, w_dtype, gemma, round_once):
    x, w = randn(gen, 3, 37, 769, dtype=x_dtype), randn(gen, 769, dtype=w_dtype, scale=0.3, mean=0 if gemma else 1)
    y = pt.rms_norm(x, w, 1e-6, gemma=gemma, round_once=round_once)
    assert y.dtype == (x_dtype if round_once else FP32) and y.shape == x.shape
    ref = exact_rms(x.double(), w.double(), 1e-6, gemma)
    close(y, ref, TOL[x_dtype], "y")
    if not round_once and x_dtype != FP32:  # HF's formula, in torch: the same value up to rsqrt's rounding
        h = x.float()
        hf = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x_dtype)
        assert hf.dtype == FP32
        close(y, hf.double(), TOL[x_dtype], "y against HF's formula")


@pytest.mark.parametrize("x_dtype, w_dtype", PAIRS)
@pytest.mark.parametrize("gemma, round_once", [(False, False), (True, True)])
def test_rms_norm_grads_match_float64_autograd(gen, x_dtype, w_dtype, gemma, round_once):
    x = randn(gen, 3, 22, 769, dtype=x_dtype).requires_grad_()
    w = torch.nn.Parameter(randn(gen, 769, dtype=w_dtype, scale=0.3, mean=0 if gemma else 1))
    y = pt.rms_norm(x, w, 1e-6, gemma=gemma, round_once=round_once)
    grad = randn(gen, *y.shape, dtype=y.dtype)
    y.backward(grad)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    exact_rms(x64, w64, 1e-6, gemma).backward(grad.double())
    assert x.grad.dtype == x_dtype and w.grad.dtype == w_dtype
    close(x.grad, x64.grad, TOL[x_dtype], "dx")
    close(w.grad, w64.grad, TOL[w_dtype] if w_dtype != FP32 else 1e-5, "dweight")


@pytest.mark.parametrize("x_dtype, w_dtype", PAIRS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_float64_autograd(gen, x_dtype, w_dtype, with_bias):
    x = (randn(gen, 70, 769, dtype=x_dtype) + 2).requires_grad_()
    w = torch.nn.Parameter(randn(gen, 769, dtype=w_dtype))
    b = torch.nn.Parameter(randn(gen, 769, dtype=w_dtype)) if with_bias else None
    y = pt.layer_norm(x, w, b, 1e-5)
    assert y.dtype == FP32  # as torch.nn.LayerNorm under autocast, which runs it in fp32
    grad = randn(gen, 70, 769, dtype=FP32)
    y.backward(grad)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, *([b] if with_bias else []))]
    ref = torch.nn.functional.layer_norm(leaves[0], (769,), *leaves[1:], eps=1e-5)
    close(y, ref.detach(), 2e-6, "y")  # the fp32 expression, rounded once to fp32
    ref.backward(grad.double())
    ours = (x.grad, w.grad, *([b.grad] if with_bias else []))
    for name, got, want in zip(("dx", "dweight", "dbias"), ours, leaves):
        assert got.dtype == (x_dtype if name == "dx" else w_dtype), name
        close(got, want.grad, TOL[x_dtype] if name == "dx" else (TOL[w_dtype] if w_dtype != FP32 else 1e-5), name)


def test_layer_norm_bias_alone_of_another_dtype_is_refused(gen):
    x, b = randn(gen, 4, 64), randn(gen, 64, dtype=FP32)
    with pytest.raises(TypeError, match="without a weight the bias is of x's dtype"):
        pt.layer_norm(x, None, b)
    with pytest.raises(TypeError, match="share one dtype"):
        pt.layer_norm(x, randn(gen, 64, dtype=FP32), randn(gen, 64, dtype=FP16))


def test_mixed_dweight_is_bitwise_reproducible(gen):
    x, grad, w = randn(gen, 3000, 4096), randn(gen, 3000, 4096, dtype=FP32), randn(gen, 4096, dtype=FP32)

    def grads():
        leaves = [t.clone().requires_grad_() for t in (x, w)]
        pt.rms_norm(*leaves, 1e-6).backward(grad)
        return [t.grad for t in leaves]

    first, second = grads(), grads()
    assert all(torch.equal(a.view(torch.int32 if a.dtype == FP32 else torch.int16),
                           c.view(torch.int32 if c.dtype == FP32 else torch.int16)) for a, c in zip(first, second))


def opcheck_cases(gen):
    x, w, b = randn(gen, 2, 5, 769), randn(gen, 769, dtype=FP32), randn(gen, 769, dtype=FP32)
    g32, g16 = randn(gen, 2, 5, 769, dtype=FP32), randn(gen, 2, 5, 769)
    ops = torch.ops.pyrms

    def leaf(t):
        return t.clone().requires_grad_()

    return {
        "rms_norm": (ops.rms_norm.default, (leaf(x), leaf(w), 1e-6, False, False)),
        "rms_norm gemma round_once": (ops.rms_norm.default, (leaf(x), leaf(w), 1e-6, True, True)),
        "rms_norm fp32 x bf16 weight": (ops.rms_norm.default, (leaf(x.float()), leaf(x[0, 0]), 1e-6, False, False)),
        "rms_norm_backward fp32 grad": (ops.rms_norm_backward.default, (g32, x, w, 1e-6, False)),
        "rms_norm_backward bf16 grad": (ops.rms_norm_backward.default, (g16, x, w, 1e-6, True)),
        "layer_norm": (ops.layer_norm.default, (leaf(x), leaf(w), leaf(b), 1e-5)),
        "layer_norm_backward": (ops.layer_norm_backward.default, (g32, x, w, 1e-5, True)),
    }


@pytest.mark.parametrize("case", ["rms_norm", "rms_norm gemma round_once", "rms_norm fp32 x bf16 weight",
                                  "rms_norm_backward fp32 grad", "rms_norm_backward bf16 grad", "layer_norm",
                                  "layer_norm_backward"])
def test_opcheck(gen, case):
    op, args = opcheck_cases(gen)[case]
    torch.library.opcheck(op, args)


def test_compile_fullgraph_under_autocast_matches_eager(gen, dynamo):
    """RMSNorm and LayerNorm modules with fp32 parameters on bf16 activations under autocast (what a model's
    Linear layers hand them): compiled and eager give the same bits, forward and backward."""
    model = torch.nn.Sequential(pt.RMSNorm(1024), pt.LayerNorm(1024)).cuda()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(randn(gen, 1024, dtype=FP32, scale=0.3, mean=1))
    x, grad = randn(gen, 4, 16, 1024), randn(gen, 4, 16, 1024, dtype=FP32)
    results = []
    for fn in (model, torch.compile(model, fullgraph=True)):
        model.zero_grad(set_to_none=True)
        leaf = x.clone().requires_grad_()
        with torch.autocast("cuda", dtype=BF16):
            y = fn(leaf)
        y.backward(grad)
        results.append((y.detach(), leaf.grad, *(p.grad.clone() for p in model.parameters())))
    assert results[0][0].dtype == FP32 and results[0][1].dtype == BF16
    for a, c in zip(*results):
        assert a.dtype == c.dtype and torch.equal(a, c)


def test_norms_under_autocast_follow_torchs_own(gen):
    """The same block with torch's formulas (HF's RMSNorm as a function, nn.LayerNorm): pyrms's outputs and
    gradients within the rounding of bf16 activations."""
    torch.manual_seed(1)
    lin1, lin2 = torch.nn.Linear(512, 1024).cuda(), torch.nn.Linear(1024, 512).cuda()
    w, ln = torch.nn.Parameter(torch.rand(1024, device="cuda") + 0.5), torch.nn.LayerNorm(512).cuda()
    x = randn(gen, 4, 16, 512, dtype=FP32)

    def hf_rms(h, weight):
        h32 = h.float()
        return weight * (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)

    grads = []
    for ours in (False, True):
        for p in (*lin1.parameters(), *lin2.parameters(), w, *ln.parameters()):
            p.grad = None
        with torch.autocast("cuda", dtype=BF16):
            h = lin1(x)
            h = pt.rms_norm(h, w, 1e-6) if ours else hf_rms(h, w)
            h = lin2(h)
            y = pt.layer_norm(h, ln.weight, ln.bias, ln.eps) if ours else ln(h)
        y.square().mean().backward()
        grads.append((y.detach(), w.grad.clone(), ln.weight.grad.clone(), lin1.weight.grad.clone()))
    for name, a, c in zip(("y", "dw", "dgamma", "dW1"), *grads):
        assert a.dtype == c.dtype, name
        close(a, c.double(), 2**-6, name)


@pytest.mark.parametrize("x_dtype", [BF16, FP16])
def test_fused_add_with_an_fp32_weight_is_the_raw_op_bit_for_bit(gen, x_dtype):
    """Inference under autocast hands the fused add fp32 weights: read exactly, x and the residual keep their dtype."""
    import pyrms

    x, residual, w = randn(gen, 5, 769, dtype=x_dtype), randn(gen, 5, 769, dtype=x_dtype), randn(gen, 769, dtype=FP32)
    raw_x, raw_residual, other_x = x.clone(), residual.clone(), x.clone()
    pyrms.fused_add_rms_norm(raw_x, raw_residual, w, 1e-6, stream=torch.cuda.current_stream())
    with torch.no_grad():
        pt.fused_add_rms_norm(other_x, residual.clone(), w.to(x_dtype), 1e-6)  # the weight rounded first
        pt.fused_add_rms_norm(x, residual, w, 1e-6)
    assert x.dtype == x_dtype and torch.equal(x, raw_x) and torch.equal(residual, raw_residual)
    assert not torch.equal(other_x, x)  # so the weight was read as fp32

"""pyrms.torch.rms_norm with a bias (RMSNorm with a bias, QuACK's): the forward is rms_norm's round_once plus the
bias (bitwise where the bias is zero), close to float64; the gradients of x, weight and bias close to float64
autograd of the formula, dweight and dx bitwise those of the same norm without a bias; the RMSNorm module's bias
parameter; compiled runs bitwise eager; opcheck; the errors.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, TOL, close, randn, same_bits  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

HIDDEN = 769  # not a multiple of any vector width: prefix, body and tail
CASES = {"bf16": (BF16, BF16), "fp16": (FP16, FP16), "fp32": (FP32, FP32), "bf16 fp32 params": (BF16, FP32),
         "fp16 fp32 params": (FP16, FP32)}


def operands(gen, case, rows=(3, 21)):
    x_dtype, p_dtype = CASES[case]
    return (randn(gen, *rows, HIDDEN, dtype=x_dtype, scale=2), randn(gen, HIDDEN, dtype=p_dtype, scale=0.3, mean=1),
            randn(gen, HIDDEN, dtype=p_dtype, scale=0.5))


def reference(x, w, b, eps):
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double() + b.double()


@pytest.mark.parametrize("case", CASES)
def test_forward(gen, case):
    x, w, b = operands(gen, case)
    y = pt.rms_norm(x, w, 1e-6, bias=b)
    assert y.dtype == (FP32 if w.dtype != x.dtype else x.dtype) and y.shape == x.shape
    close(y, reference(x, w, b, 1e-6), TOL[x.dtype], "y")
    if w.dtype == x.dtype:  # a zero bias: round_once's numbers (+ 0 turns a -0 into +0)
        zero = pt.rms_norm(x, w, 1e-6, bias=torch.zeros_like(b))
        assert torch.equal(zero.float(), pt.rms_norm(x, w, 1e-6, round_once=True).float())
    no_weight = pt.rms_norm(x, None, 1e-6, bias=b.to(x.dtype))
    close(no_weight, reference(x, torch.ones_like(w), b.to(x.dtype), 1e-6), TOL[x.dtype], "y without a weight")


@pytest.mark.parametrize("case", CASES)
def test_gradients(gen, case):
    x, w, b = operands(gen, case)
    dy = randn(gen, *x.shape, dtype=FP32 if w.dtype != x.dtype else x.dtype)
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    pt.rms_norm(*ours[:2], 1e-6, bias=ours[2]).backward(dy)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    reference(*ref, 1e-6).backward(dy.double())
    for name, a, r in zip(("dx", "dweight", "dbias"), ours, ref):
        assert a.grad.dtype == a.dtype, name
        close(a.grad, r.grad, TOL[a.dtype] if name == "dx" else max(TOL[a.dtype], 1e-4), name)
    # the bias changes neither dx nor dweight: bitwise those of the same norm without one (where it is one
    # kernel: x's dtype, whose output's gradient is dy of x's dtype too)
    if w.dtype == x.dtype:
        plain = [t.clone().requires_grad_() for t in (x, w)]
        pt.rms_norm(*plain, 1e-6).backward(dy)
        same_bits(ours[0].grad, plain[0].grad, "dx")
        same_bits(ours[1].grad, plain[1].grad, "dweight")


def test_module(gen):
    norm = pt.RMSNorm(HIDDEN, 1e-5, bias=True, device="cuda", dtype=BF16)
    assert set(norm.state_dict()) == {"weight", "bias"} and torch.equal(norm.bias, torch.zeros_like(norm.bias))
    assert "bias=True" in repr(norm)
    with torch.no_grad():
        norm.bias.copy_(randn(gen, HIDDEN, dtype=BF16))
    x = randn(gen, 4, HIDDEN)
    y = norm(x)
    same_bits(y, pt.rms_norm(x, norm.weight, 1e-5, bias=norm.bias), "y")
    y.float().sum().backward()
    assert norm.bias.grad is not None and norm.weight.grad is not None
    assert pt.RMSNorm(HIDDEN, device="cuda").bias is None
    with pytest.raises(ValueError, match="bias=True needs hidden_size and goes without gemma; got gemma=True"):
        pt.RMSNorm(HIDDEN, gemma=True, bias=True)


@pytest.mark.parametrize("case", ["bf16", "bf16 fp32 params"])
def test_compile_fullgraph_matches_eager(gen, dynamo, case):
    x, w, b = operands(gen, case, rows=(4, 33))

    def step(x, w, b):
        return (pt.rms_norm(x, w, 1e-6, bias=b).float() * 3).sum()

    eager, comp = [[t.clone().requires_grad_() for t in (x, w, b)] for _ in range(2)]
    step(*eager).backward()
    torch.compile(step, fullgraph=True)(*comp).backward()
    for name, a, c in zip(("dx", "dweight", "dbias"), eager, comp):
        same_bits(c.grad, a.grad, name)


@pytest.mark.parametrize("case", ["bf16", "bf16 fp32 params", "fp32"])
def test_opcheck(gen, case):
    x, w, b = operands(gen, case, rows=(2, 5))
    args = tuple(t.clone().requires_grad_() for t in (x, w, b)) + (1e-6, True)
    torch.library.opcheck(torch.ops.pyrms.layer_norm.default, args)


def test_errors(gen):
    x, w, b = operands(gen, "bf16")
    with pytest.raises(ValueError, match="bias goes with a weight \\[hidden\\] or none, without gemma; got gemma=True"):
        pt.rms_norm(x, w, gemma=True, bias=b)
    per_head = randn(gen, 1, HIDDEN)
    with pytest.raises(ValueError, match="got a weight per head of shape \\(1, 769\\)"):
        pt.rms_norm(x.view(3, 21, 1, HIDDEN), per_head, bias=b)
    with pytest.raises(ValueError, match="rms=True is RMSNorm with a bias, and bias is None"):
        torch.ops.pyrms.layer_norm(x, w, None, 1e-6, True)

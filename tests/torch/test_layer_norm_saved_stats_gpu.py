"""pyrms.torch.layer_norm's eager autograd saves each row's mean and rstd from the forward (RMSNorm with a bias,
pyrms.torch.rms_norm's bias=, its rstd alone) and its backward reads them: the saved values are the forward's
statistics, and the gradients are bitwise those of the custom op's autograd, which recomputes them."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, randn, same_bits  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]


CASES = {  # name -> (x dtype, parameters' dtype or None, shape, bias)
    "bf16": (BF16, BF16, (4, 33, 4096), True),
    "fp16 no bias": (FP16, FP16, (300, 2048), False),
    "fp32": (FP32, FP32, (2, 5120), True),
    "bf16 fp32 parameters": (BF16, FP32, (1000, 5120), True),
    "no weight": (BF16, None, (17, 8192), True),
    "one row": (BF16, BF16, (1, 4096), True),
}


# RMSNorm with a bias (rms) where the case has a weight and a bias
RUNS = [(case, rms) for case, (_, p_dtype, _, has_bias) in CASES.items() for rms in (False, True)
        if not rms or (has_bias and p_dtype is not None)]


@pytest.mark.parametrize("case, rms", RUNS, ids=[f"{case}{' rms' if rms else ''}" for case, rms in RUNS])
@pytest.mark.parametrize("sliced", [False, True])
def test_the_saved_statistics_give_the_recomputed_gradients(gen, case, sliced, rms):
    x_dtype, p_dtype, shape, has_bias = CASES[case]
    big = randn(gen, *shape[:-1], shape[-1] + (64 if sliced else 0), dtype=x_dtype, mean=2)
    x0 = big[..., :shape[-1]]  # a row slice: rows one stride apart, not contiguous
    w0 = None if p_dtype is None else randn(gen, shape[-1], dtype=p_dtype, mean=1)
    b0 = randn(gen, shape[-1], dtype=p_dtype or x_dtype) if has_bias else None

    def leaves():
        return (x0.detach().requires_grad_(), *(None if t is None else t.clone().requires_grad_() for t in (w0, b0)))

    x, w, b = leaves()
    y = pt.rms_norm(x, w, 1e-5, bias=b) if rms else pt.layer_norm(x, w, b, 1e-5)
    _, _, mean, rstd = y.grad_fn.saved_tensors
    h = x0.reshape(-1, shape[-1]).double()
    if rms:
        assert mean is None
        want_rstd = torch.rsqrt(h.pow(2).mean(-1) + 1e-5)
    else:
        assert mean.dtype == FP32 and mean.shape == (h.shape[0],)
        assert torch.allclose(mean.double(), h.mean(-1), rtol=1e-5, atol=1e-6)
        want_rstd = torch.rsqrt(h.var(-1, unbiased=False) + 1e-5)
    assert rstd.dtype == FP32 and rstd.shape == (h.shape[0],)
    assert torch.allclose(rstd.double(), want_rstd, rtol=1e-5, atol=0)
    grad = randn(gen, *y.shape, dtype=y.dtype)
    y.backward(grad)
    xr, wr, br = leaves()
    yr = torch.ops.pyrms.layer_norm.default(xr, wr, br, 1e-5, rms)  # its autograd recomputes the statistics
    same_bits(y.detach(), yr.detach(), "y")
    yr.backward(grad)
    for name, got, want in (("dx", x, xr), ("dweight", w, wr), ("dbias", b, br)):
        if got is not None:
            same_bits(got.grad, want.grad, name)

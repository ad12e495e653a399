"""pyrms.torch.rms_norm's eager autograd saves each row's rstd from the forward (where its rows run one per
block: not for rows of a 32-thread fold past the few-row threshold, which run packed) and its backward reads it: the saved values are the forward's inv_rms, and the gradients are bitwise
those of the custom op's autograd, which recomputes them."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, randn, same_bits  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]


CASES = {  # name -> (x dtype, weight dtype or None, shape, keywords)
    "bf16": (BF16, BF16, (4, 33, 4096), {}),
    "fp16 gemma": (FP16, FP16, (300, 2048), {"gemma": True, "round_once": True}),
    "fp32": (FP32, FP32, (2, 5120), {}),
    "bf16 fp32 weight": (BF16, FP32, (1000, 5120), {}),
    "no weight": (BF16, None, (17, 8192), {}),
    "one row": (BF16, BF16, (1, 4096), {}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("sliced", [False, True])
def test_the_saved_rstd_gives_the_recomputed_gradients(gen, case, sliced):
    x_dtype, w_dtype, shape, kw = CASES[case]
    big = randn(gen, *shape[:-1], shape[-1] + (64 if sliced else 0), dtype=x_dtype)
    x0 = big[..., :shape[-1]]  # a row slice: rows one stride apart, not contiguous
    w0 = None if w_dtype is None else randn(gen, shape[-1], dtype=w_dtype, mean=1)
    x, w = x0.detach().requires_grad_(), None if w0 is None else w0.clone().requires_grad_()
    y = pt.rms_norm(x, w, 1e-6, **kw)
    rstd = y.grad_fn.saved_tensors[2]
    assert rstd is not None and rstd.dtype == FP32 and rstd.shape == (x0.numel() // shape[-1],)
    h = x0.reshape(-1, shape[-1]).double()
    want = torch.rsqrt(h.pow(2).mean(-1) + 1e-6)
    assert torch.allclose(rstd.double(), want, rtol=1e-6, atol=0)
    grad = randn(gen, *y.shape, dtype=y.dtype)
    y.backward(grad)
    xr, wr = x0.detach().requires_grad_(), None if w0 is None else w0.clone().requires_grad_()
    yr = torch.ops.pyrms.rms_norm.default(xr, wr, 1e-6, kw.get("gemma", False), kw.get("round_once", False))
    same_bits(y.detach(), yr.detach(), "y")
    yr.backward(grad)
    same_bits(x.grad, xr.grad, "dx")
    if w is not None:
        same_bits(w.grad, wr.grad, "dweight")


def test_packed_short_rows_save_none_and_recompute(gen):
    """Short rows of many tokens run packed several to a warp, which stores no rstd: the backward recomputes."""
    x = randn(gen, 5000, 128).requires_grad_()
    w = randn(gen, 128, mean=1).requires_grad_()
    y = pt.rms_norm(x, w, 1e-6)
    assert y.grad_fn.saved_tensors[2] is None
    y.backward(torch.ones_like(y))
    assert x.grad is not None and w.grad is not None and torch.isfinite(x.grad.float()).all()

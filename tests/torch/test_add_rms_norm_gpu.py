"""pyrms.torch.add_rms_norm: the residual add and RMSNorm into new tensors, differentiable. Its outputs are the
in-place fused_add_rms_norm's bit for bit; its gradients are those of autograd through ``x + residual`` and
pyrms's rms_norm (bitwise, where that spells the same function) or float64 autograd of the exact formula (the
fp32 sums); compiled and eager agree; opcheck.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, TOL, close, randn, same_bits  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

HIDDEN = 769  # not a multiple of any vector width: prefix, body and tail


def leaves(*tensors):
    return [t.clone().requires_grad_() for t in tensors]


OPTIONS = {  # name -> (x dtype, residual dtype, weight dtype, add_rms_norm's keywords)
    "bf16": (BF16, BF16, BF16, {}),
    "fp16 gemma round_once": (FP16, FP16, FP16, {"gemma": True, "round_once": True}),
    "fp32": (FP32, FP32, FP32, {}),
    "bf16 fp32 weight": (BF16, BF16, FP32, {}),
    "bf16 fp32 sum": (BF16, BF16, BF16, {"sum_precision": "fp32", "round_once": True}),
    "bf16 fp32 residual stream": (BF16, BF16, FP32, {"residual_dtype": FP32}),
    "fp16 fp32 residual given": (FP16, FP32, FP32, {}),
    "no weight": (BF16, BF16, None, {}),
}


def operands(gen, case, rows=(3, 21)):
    x_dtype, r_dtype, w_dtype, kw = OPTIONS[case]
    x, residual = randn(gen, *rows, HIDDEN, dtype=x_dtype), randn(gen, *rows, HIDDEN, dtype=r_dtype)
    gemma = kw.get("gemma", False)
    w = None if w_dtype is None else randn(gen, HIDDEN, dtype=w_dtype, scale=0.3, mean=0 if gemma else 1)
    return x, residual, w, kw


@pytest.mark.parametrize("case", list(OPTIONS))
def test_outputs_are_the_in_place_op_bit_for_bit(gen, case):
    x, residual, w, kw = operands(gen, case)
    y, residual_out = pt.add_rms_norm(x, residual, w, 1e-6, **kw)
    want_residual = residual.to(kw.get("residual_dtype", residual.dtype)).clone()
    want_x, in_place = x.clone(), {k: v for k, v in kw.items() if k != "residual_dtype"}
    with torch.no_grad():
        pt.fused_add_rms_norm(want_x, want_residual, w, 1e-6, **in_place)
    same_bits(y, want_x, "y")
    same_bits(residual_out, want_residual, "residual_out")
    assert y.data_ptr() != x.data_ptr() and residual_out.data_ptr() != residual.data_ptr()


@pytest.mark.parametrize("case", ["bf16", "fp16 gemma round_once", "fp32", "no weight"])
@pytest.mark.parametrize("used", ["both", "y only", "residual_out only"])
def test_grads_are_autograd_through_the_sum_and_rms_norm(gen, case, used):
    """With the rounded sum (the default), add_rms_norm is ``s = x + residual; y = rms_norm(s)``: autograd through
    that spelling (torch's add, pyrms's rms_norm) gives the same bits, whichever outputs the loss uses."""
    x, residual, w, kw = operands(gen, case)
    ours, ref = leaves(x, residual, *([w] if w is not None else [])), leaves(x, residual, *([w] if w is not None else []))
    y, s = pt.add_rms_norm(ours[0], ours[1], ours[2] if w is not None else None, 1e-6, **kw)
    s_ref = ref[0] + ref[1]
    y_ref = pt.rms_norm(s_ref, ref[2] if w is not None else None, 1e-6, **kw)
    same_bits(s, s_ref.detach(), "residual_out")
    same_bits(y, y_ref.detach(), "y")
    dy, ds = randn(gen, *y.shape, dtype=y.dtype), randn(gen, *s.shape, dtype=s.dtype)
    loss_terms = {"both": ((y, dy), (s, ds)), "y only": ((y, dy),), "residual_out only": ((s, ds),)}[used]
    ref_terms = {"both": ((y_ref, dy), (s_ref, ds)), "y only": ((y_ref, dy),), "residual_out only": ((s_ref, ds),)}[used]
    torch.autograd.backward([t for t, _ in loss_terms], [g for _, g in loss_terms])
    torch.autograd.backward([t for t, _ in ref_terms], [g for _, g in ref_terms])
    for name, a, b in zip(("dx", "dresidual", "dweight"), ours, ref):
        if used == "residual_out only" and name == "dweight":
            assert a.grad is None or not a.grad.any(), "no gradient reaches the weight through residual_out alone"
            continue
        same_bits(a.grad, b.grad, name)


def exact(x, residual, w, eps, gemma, rounded=None):
    """The formula in float64; ``rounded``: the sum as stored (the rounded sum is what is normalized), its
    gradient passed straight to x and residual, as the rounding has none."""
    s = x + residual
    if rounded is not None:
        s = s + (rounded.double() - s).detach()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * (1 + w if gemma else w), s


@pytest.mark.parametrize("case", ["bf16 fp32 weight", "bf16 fp32 sum", "bf16 fp32 residual stream",
                                  "fp16 fp32 residual given"])
def test_grads_of_the_fp32_sums_and_mixed_weights_match_float64_autograd(gen, case):
    x, residual, w, kw = operands(gen, case)
    ours = leaves(x, residual, w)
    y, s = pt.add_rms_norm(*ours, 1e-6, **kw)
    fp32_stream = kw.get("residual_dtype") is FP32 or residual.dtype == FP32
    assert y.dtype == x.dtype and s.dtype == (FP32 if fp32_stream else residual.dtype)
    if fp32_stream:  # the fp32 sum is stored exactly
        same_bits(s, x.float() + residual.float(), "residual_out")
    dy, ds = randn(gen, *y.shape, dtype=y.dtype), randn(gen, *s.shape, dtype=s.dtype)
    torch.autograd.backward([y, s], [dy, ds])
    ref = [t.detach().double().requires_grad_() for t in (x, residual, w)]
    rounded = None if fp32_stream or kw.get("sum_precision") == "fp32" else x + residual
    y64, s64 = exact(*ref, 1e-6, kw.get("gemma", False), rounded)
    close(y, y64.detach(), TOL[x.dtype], "y")
    torch.autograd.backward([y64, s64], [dy.double(), ds.double()])
    for name, a, b in zip(("dx", "dresidual", "dweight"), ours, ref):
        assert a.grad.dtype == a.dtype, name
        close(a.grad, b.grad, TOL[a.dtype] if a.dtype != FP32 or name != "dweight" else 1e-5, name)


@pytest.mark.parametrize("case", ["bf16", "bf16 fp32 residual stream", "bf16 fp32 sum"])
def test_compile_fullgraph_matches_eager(gen, dynamo, case):
    x, residual, w, kw = operands(gen, case, rows=(4, 33))

    def step(x, residual, w):
        y, s = pt.add_rms_norm(x, residual, w, 1e-6, **kw)
        return (y.float() * 3).sum() + (s.float() ** 2).sum()

    compiled = torch.compile(step, fullgraph=True)
    eager, comp = leaves(x, residual, w), leaves(x, residual, w)
    step(*eager).backward()
    compiled(*comp).backward()
    for name, a, b in zip(("dx", "dresidual", "dweight"), eager, comp):
        same_bits(b.grad, a.grad, name)


@pytest.mark.parametrize("case", ["bf16", "bf16 fp32 weight", "bf16 fp32 sum", "bf16 fp32 residual stream",
                                  "no weight"])
def test_opcheck(gen, case):
    x, residual, w, kw = operands(gen, case, rows=(2, 5))
    args = (*leaves(x, residual), None if w is None else w.clone().requires_grad_(), 1e-6, kw.get("gemma", False),
            kw.get("round_once", False), kw.get("sum_precision"), kw.get("residual_dtype") is FP32)
    torch.library.opcheck(torch.ops.pyrms.add_rms_norm.default, args)


def test_bad_residual_dtype_is_refused(gen):
    x = randn(gen, 2, 64)
    with pytest.raises(TypeError, match=r"residual_dtype must be None \(the residual's, torch.bfloat16\) or "
                                        r"torch.float32, got torch.float16"):
        pt.add_rms_norm(x, x.clone(), None, residual_dtype=FP16)

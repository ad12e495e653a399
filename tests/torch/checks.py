"""What the GPU tests of pyrms.torch share: random CUDA operands, bitwise equality of tensors, and closeness to a
float64 reference. Imports torch: import it after ``pytest.importorskip("torch")``."""
import torch

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# Tolerance as a fraction of the largest reference value: two units in the last place of the dtype at that
# magnitude (the kernels round once, from fp32), ample for fp32 sums over rows.
TOL = {FP32: 2e-5, FP16: 2**-9, BF16: 2**-7}
_INT_VIEW = {FP32: torch.int32, BF16: torch.int16, FP16: torch.int16}


def randn(gen, *shape, dtype=BF16, scale=1.0, mean=0.0):
    """Normal values on the GPU from ``gen``, scaled and shifted in fp32, then rounded to ``dtype``."""
    return (torch.randn(*shape, device="cuda", generator=gen) * scale + mean).to(dtype)


def bits(t):
    """t's bits as integers of its width (t contiguous)."""
    return t.view(_INT_VIEW[t.dtype])


def same_bits(a, b, what):
    """a and b have one dtype and shape and the same bits; the message says how far apart they are."""
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert torch.equal(bits(a.contiguous()), bits(b.contiguous())), \
        f"{what}: {(a.float() - b.float()).abs().max().item():.3g} apart"


def close(ours, want, tol, what):
    """ours within ``tol`` of the largest |want| from ``want`` (a float64 reference) everywhere."""
    assert ours.shape == want.shape, what
    err = (ours.double() - want).abs().max().item()
    assert err <= tol * want.abs().max().item() + 1e-30, f"{what}: max error {err:.3g}"

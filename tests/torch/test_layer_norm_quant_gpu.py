"""pyrms.torch.layer_norm_quant: bitwise the twin (layer_norm_quant_twin) for every input dtype, output dtype and
parameter kind (FlashInfer's fp32 gamma and beta included), round_input; a scale tensor reads the same bits as the
value; compiled runs (torch.compile fullgraph) bitwise eager; opcheck; the errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms.torch as pt  # noqa: E402
from pyrms.ops.layer_norm import plan as ln_plan  # noqa: E402
from pyrms.ops.layer_norm import twin as ln_twin  # noqa: E402
from tests.torch.checks import BF16, FP16, FP32, randn  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

HIDDEN = 769  # not a multiple of any vector width: prefix, body and tail
CASES = {"bf16": (BF16, BF16), "fp16": (FP16, FP16), "fp32": (FP32, FP32), "bf16 fp32 params": (BF16, FP32),
         "fp16 fp32 params": (FP16, FP32)}
QUANT = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
_NUMPY = {BF16: "bfloat16", FP16: "float16", FP32: "float32"}


def operands(gen, case, rows=(3, 7)):
    x_dtype, p_dtype = CASES[case]
    return (randn(gen, *rows, HIDDEN, dtype=x_dtype, scale=2), randn(gen, HIDDEN, dtype=p_dtype, scale=0.3, mean=1),
            randn(gen, HIDDEN, dtype=p_dtype, scale=0.5))


def _host(t):
    """t's values on the host as numpy (bf16 through ml_dtypes' bfloat16, bitwise)."""
    import ml_dtypes

    if t.dtype == BF16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def expected(x, w, b, eps, scale, out_dtype, round_input) -> np.ndarray:
    """The twin's bytes for x's rows (contiguous: each row's phase from its index)."""
    rows = x.reshape(-1, HIDDEN)
    block = ln_plan.plan_layer_norm_quant(_NUMPY[x.dtype], HIDDEN).block
    n = 16 // x.element_size()
    phases = (np.arange(rows.shape[0]) * HIDDEN + x.data_ptr() // x.element_size()) % n
    q = ln_twin.layer_norm_quant_twin(_host(rows), None if w is None else _host(w), None if b is None else _host(b),
                                      eps, scale, str(out_dtype).removeprefix("torch."), block=block, row_phases=phases,
                                      round_input=round_input)
    return q.view(np.uint8)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("case", CASES)
def test_bitwise_the_twin(gen, case, out_dtype):
    x, w, b = operands(gen, case)
    for round_input in (False, True):
        for weight, bias in ((w, b), (None, None)) if w.dtype == x.dtype else ((w, b),):
            q = pt.layer_norm_quant(x, weight, bias, 1e-6, scale=0.01, out_dtype=out_dtype, round_input=round_input)
            assert q.dtype == out_dtype and q.shape == x.shape
            got = q.view(torch.uint8).reshape(-1, HIDDEN).cpu().numpy()
            assert np.array_equal(got, expected(x, weight, bias, 1e-6, 0.01, out_dtype, round_input)), round_input


def test_scale_tensor_compiled_and_opcheck(gen):
    x, w, b = operands(gen, "bf16 fp32 params")
    s = torch.tensor([0.02], dtype=FP32, device="cuda")
    eager = pt.layer_norm_quant(x, w, b, 1e-6, scale=0.02, round_input=True)
    assert torch.equal(pt.layer_norm_quant(x, w, b, 1e-6, scale=s, round_input=True).view(torch.uint8),
                       eager.view(torch.uint8))
    compiled = torch.compile(lambda x, w, b, s: pt.layer_norm_quant(x, w, b, 1e-6, scale=s, round_input=True),
                             fullgraph=True)
    assert torch.equal(compiled(x, w, b, s).view(torch.uint8), eager.view(torch.uint8))
    torch.library.opcheck(torch.ops.pyrms.layer_norm_quant.default,
                          (x, w, b, 1e-6, torch.float8_e4m3fn, 0.02, None, False))


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(out_dtype=torch.bfloat16), TypeError, "out_dtype is torch.bfloat16; pyrms.torch quantizes to"),
    (dict(scale=None), ValueError, "layer_norm_quant takes one static scale"),
    (dict(scale=0.0), ValueError, "scale must be finite and > 0 in float32"),
    (dict(scale="0.5"), TypeError, "scale must be a float or a one-element torch.float32 CUDA tensor"),
])
def test_errors(gen, kwargs, exc, message):
    x, w, b = operands(gen, "bf16")
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)")):
        pt.layer_norm_quant(x, w, b, 1e-6, **{"scale": 0.5, **kwargs})

"""pyrms.fused_add_rms_norm and pyrms.layer_norm on the GPU: bitwise equality with their twins on
every alignment, size and stride (tests.support.case_matrix's GPU axes), through tests.support.testing's
guarded, poisoned operands.

Every check draws fresh random inputs and compares whole allocations bit for bit: the written rows
against the twin, everything else (guards, gaps between strided rows, the inputs) against what was
there before.
"""
import numpy as np
import pytest

import pyrms
from tests.support import case_matrix
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.support.testing import bits, check_case
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.rms_norm import plan as rms_plan

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{axis}-{c}") for family in ("fused_add_rms_norm", "layer_norm")
                                  for axis in case_matrix.GPU_AXES for c in case_matrix.gpu(family, axis)])
def test_every_layout_of_the_case_matrix(rng, case):
    """Each pointer at every misalignment, all misaligned differently, the case matrix's hidden sizes, strided
    rows, more than 65535 rows, the fused add's options, LayerNorm in place and without bias, each
    kernel for few and for many rows."""
    check_case(rng, case)


def test_fused_add_input_equals_rms_norm_of_the_new_residual(rng):
    # The in-place semantics end to end: input becomes exactly rms_norm(residual), computed by rms_norm.
    x = rng.uniform(-2, 2, (33, 4097)).astype(np.float16)
    r = rng.uniform(-2, 2, (33, 4097)).astype(np.float16)
    w = rng.uniform(-1, 1, 4097).astype(np.float16)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(r) as dr, pyrms.Tensor.from_numpy(w) as dw, \
            pyrms.Tensor.empty((33, 4097), "float16") as out:
        pyrms.fused_add_rms_norm(dx, dr, dw, 1e-6, 33, 4097)
        pyrms.rms_norm(out, dr, dw, 1e-6, 33, 4097)
        got_x, got_r, want = dx.to_numpy(), dr.to_numpy(), out.to_numpy()
    assert np.array_equal(bits(got_r), bits((x.astype(np.float32) + r.astype(np.float32)).astype(np.float16)))
    assert fused_plan.plan_fused_add_rms_norm("float16", 4097).block == rms_plan.plan_rms_norm("float16", 4097).block
    assert np.array_equal(bits(got_x), bits(want))
    ref, _ = fused_twin.fused_add_rms_norm_ref(x, r, w, 1e-6)
    assert np.linalg.norm(got_x.astype(np.float64) - ref) / np.linalg.norm(ref) < 2e-3


def test_layer_norm_against_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    gen = torch.Generator(device="cuda").manual_seed(11)
    for torch_dtype, name in ((torch.float16, "float16"), (torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        big = torch.rand((17, 4110), device="cuda", generator=gen).to(torch_dtype) * 4 + 3  # mean far from 0
        x = big[:, 5:5 + 4097]  # row stride 4110, base 5 elements past a boundary
        w = torch.rand(4097, device="cuda", generator=gen).to(torch_dtype)
        b = torch.rand(4097, device="cuda", generator=gen).to(torch_dtype) - 0.5
        out = torch.full((17, 4097), float("nan"), device="cuda", dtype=torch_dtype)
        view = (lambda t: t.view(torch.int16)) if name == "bfloat16" else (lambda t: t)
        pyrms.layer_norm(view(out), view(x), view(w), view(b), 1e-5, 17, 4097, dtype=name)
        torch.cuda.synchronize()
        ref = torch.nn.functional.layer_norm(x.double(), (4097,), w.double(), b.double(), eps=1e-5)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-6}[name], (name, err)
        out.fill_(float("nan"))
        pyrms.layer_norm(view(out), view(x), view(w), None, 1e-5, 17, 4097, dtype=name)  # no bias
        torch.cuda.synchronize()
        ref = torch.nn.functional.layer_norm(x.double(), (4097,), w.double(), None, eps=1e-5)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-6}[name], (name, "no bias", err)


def test_streams_and_validation_before_launch(rng):
    with pyrms.Stream() as s:
        check_fused_add_rms_norm(rng, "bfloat16", 64, 5120, stream=s)
        check_layer_norm(rng, "float16", 64, 5125, stream=s.handle)
    with pyrms.Tensor.empty((4, 64), "float32") as t, pyrms.Tensor.empty((64,), "float32") as w:
        with pytest.raises(ValueError, match="input and residual overlap"):
            pyrms.fused_add_rms_norm(t, t, w, 1e-5, 4, 64)
        with pytest.raises(ValueError, match="bias has shape"):
            pyrms.layer_norm(t, t, w, t, 1e-5, 4, 64)

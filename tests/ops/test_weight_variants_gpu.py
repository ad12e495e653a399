"""The weight variants of rms_norm, fused_add_rms_norm and layer_norm on the GPU: no weight
(``weight=None``) and an fp32 weight beside bf16/fp16 rows, bit for bit against the twin on every
misalignment of every pointer, both launch shapes, strides, in place, and arrays (torch tensors).

Each case is one tests.support.testing check: guarded operands, the output poisoned, whole allocations
compared (rows against the twin, guards and gaps against what was there).
"""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.ops.rms_norm.cases import check_rms_norm
from tests.support.testing import bits
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

pytestmark = pytest.mark.gpu

# (dtype, weight kind): fp32 weights beside the 2-byte dtypes; no weight for every dtype
KINDS = [("bfloat16", "float32"), ("float16", "float32"), ("bfloat16", "none"), ("float16", "none"),
         ("float32", "none")]


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("dtype, weight", KINDS)
@pytest.mark.parametrize("hidden", [7, 769, 5125])
def test_rms_norm_every_misalignment(rng, dtype, weight, hidden, variant):
    vec = dtypes.get(dtype).vec_elems
    w_vec = 4 if weight == "float32" else vec  # the weight's offsets in its own elements
    for off in range(vec):
        check_rms_norm(rng, dtype, 3, hidden, in_off=off, weight=weight, variant=variant)
        check_rms_norm(rng, dtype, 3, hidden, out_off=off, weight=weight, variant=variant)
    if weight != "none":
        for off in range(w_vec):
            check_rms_norm(rng, dtype, 3, hidden, w_off=off, weight=weight, variant=variant)
    check_rms_norm(rng, dtype, 3, hidden, in_off=1, w_off=w_vec - 1, out_off=vec - 1, weight=weight, variant=variant)


@pytest.mark.parametrize("dtype, weight", KINDS)
def test_rms_norm_sizes_strides_options(rng, dtype, weight):
    for hidden in (1, 8, 4096, 5120, 16384, 65537):
        check_rms_norm(rng, dtype, 5, hidden, weight=weight)
    check_rms_norm(rng, dtype, 300, 5120, in_stride=5127, out_stride=5130, in_off=2, weight=weight)  # many rows
    check_rms_norm(rng, dtype, 17, 4096, in_place=True, weight=weight)
    check_rms_norm(rng, dtype, 9, 2048, weight=weight, round_once=True)
    check_rms_norm(rng, dtype, 9, 2048, weight=weight, pdl=False)
    if weight != "none":
        check_rms_norm(rng, dtype, 9, 2048, weight=weight, gemma=True)


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("dtype, weight", KINDS)
def test_fused_add_every_misalignment(rng, dtype, weight, variant):
    vec = dtypes.get(dtype).vec_elems
    for hidden in (7, 5125):
        for off in range(vec):
            check_fused_add_rms_norm(rng, dtype, 3, hidden, offsets={"input": off}, weight=weight, variant=variant)
            check_fused_add_rms_norm(rng, dtype, 3, hidden, offsets={"residual": off}, weight=weight, variant=variant)
        if weight == "float32":
            for off in range(4):
                check_fused_add_rms_norm(rng, dtype, 3, hidden, offsets={"weight": off}, weight=weight, variant=variant)
    check_fused_add_rms_norm(rng, dtype, 300, 5120, strides={"input": 5121, "residual": 5133}, weight=weight)


def test_fp32_weight_equals_the_same_values_in_the_dtype_when_they_are_representable(rng):
    # An fp32 weight holding bf16-representable values must give exactly the bf16 weight's output.
    x = rng.uniform(-2, 2, (33, 5120)).astype(dtypes.BFLOAT16.numpy)
    w16 = rng.uniform(-1, 1, 5120).astype(dtypes.BFLOAT16.numpy)
    xt, w16t, w32t = (pyrms.Tensor.from_numpy(a) for a in (x, w16, w16.astype(np.float32)))
    try:
        a, b = pyrms.rms_norm(None, xt, w16t, 1e-6), pyrms.rms_norm(None, xt, w32t, 1e-6)
        assert np.array_equal(bits(a.to_numpy()), bits(b.to_numpy()))
        none = pyrms.rms_norm(None, xt, None, 1e-6)
        ones = pyrms.rms_norm(None, xt, pyrms.Tensor.from_numpy(np.ones(5120, dtypes.BFLOAT16.numpy)), 1e-6)
        assert np.array_equal(bits(none.to_numpy()), bits(ones.to_numpy()))  # w = 1 is exact
        for t in (a, b, none, ones):
            t.close()
    finally:
        for t in (xt, w16t, w32t):
            t.close()


def test_torch_tensors_fp32_weight_and_no_weight():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x = (torch.rand((17, 4096), device="cuda", dtype=torch.float32) * 4 - 2).to(torch.float16)
    w = torch.rand(4096, device="cuda", dtype=torch.float32)
    block = rms_plan.plan_rms_norm("float16", 4096).block
    for weight in (w, None):
        out = pyrms.rms_norm(torch.empty_like(x), x, weight, 1e-6)
        torch.cuda.synchronize()
        twin = rms_twin.rms_norm_twin(x.cpu().numpy(), None if weight is None else w.cpu().numpy(), 1e-6, block=block)
        assert np.array_equal(bits(out.cpu().numpy()), bits(twin))
    with pytest.raises(ValueError, match="weight has dtype float32, but weight_dtype is float16"):
        pyrms.rms_norm(torch.empty_like(x), x, w, 1e-6, weight_dtype="float16")


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_without_weight(rng, dtype, bias, variant):
    vec = dtypes.get(dtype).vec_elems
    for hidden in (7, 769, 5125):
        for name in ("input", "out") + (("bias",) if bias else ()):
            for off in range(vec):
                check_layer_norm(rng, dtype, 3, hidden, offsets={name: off}, bias=bias, weight="none", variant=variant)
    check_layer_norm(rng, dtype, 300, 4096, strides={"input": 4099}, bias=bias, weight="none")
    check_layer_norm(rng, dtype, 17, 5120, in_place=True, bias=bias, weight="none")

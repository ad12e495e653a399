"""pyrms.fused_add_rms_norm and pyrms.layer_norm on the GPU: bitwise equality with their twins on
every alignment, size and stride (GUIDE.md §4), through pyrms.testing's guarded, poisoned operands.

Every check draws fresh random inputs and compares whole allocations bit for bit: the written rows
against the twin, everything else (guards, gaps between strided rows, the inputs) against what was
there before.
"""
import functools

import numpy as np
import pytest

import pyrms
from pyrms import dtypes, plan, reference
from pyrms.testing import bits, check_fused_add_rms_norm, check_layer_norm

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
HIDDEN = [1, 5, 7, 8, 9, 31, 769, 4096, 5120, 5125, 8192, 16384, 65536, 65537]
CHECKS = {"fused_add": (check_fused_add_rms_norm, ("input", "residual", "weight")),
          "layer_norm": (check_layer_norm, ("input", "out", "weight", "bias")),
          "layer_norm_no_bias": (functools.partial(check_layer_norm, bias=False), ("input", "out", "weight"))}


@pytest.mark.parametrize("variant", ["few", "many"])  # the kernels for few and for many rows
@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 769, 5125])
def test_each_pointer_misaligned_by_every_element_offset(rng, op, dtype, hidden, variant):
    check, names = CHECKS[op]
    for name in names:
        for off in range(dtypes.get(dtype).vec_elems):
            check(rng, dtype, 3, hidden, offsets={name: off}, variant=variant)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pointers_misaligned_differently(rng, op, dtype):
    check, names = CHECKS[op]
    n = dtypes.get(dtype).vec_elems
    for shift in (1, 2, 3, n - 1):
        offsets = {name: (shift * (k + 1)) % n for k, name in enumerate(names)}
        for hidden in (8, 9, 4096, 5120):
            check(rng, dtype, 2, hidden, offsets=offsets)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_hidden_sizes(rng, op, dtype, hidden):
    check, names = CHECKS[op]
    for variant in ("few", "many"):
        check(rng, dtype, 3, hidden, variant=variant)
        check(rng, dtype, 2, hidden, offsets={name: 1 for name in names}, variant=variant)


@pytest.mark.parametrize("op", CHECKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, stride_a, stride_b", [(5120, 5123, 5131), (769, 1001, 771), (16, 17, 19),
                                                        (4096, 4104, 4099)])
def test_row_strides(rng, op, dtype, hidden, stride_a, stride_b):
    check, names = CHECKS[op]
    strides = dict(zip(names[:2], (stride_a, stride_b)))  # the two [rows, hidden] operands
    check(rng, dtype, 7, hidden, strides=strides)
    check(rng, dtype, 5, hidden, strides=strides, offsets={name: k + 1 for k, name in enumerate(names)})


@pytest.mark.parametrize("dtype", DTYPES)
def test_more_than_65535_rows(rng, dtype):
    check_fused_add_rms_norm(rng, dtype, 70001, 9, strides={"input": 11, "residual": 13}, offsets={"residual": 1})
    check_layer_norm(rng, dtype, 70001, 9, strides={"input": 10})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma, round_once", [(True, False), (False, True), (True, True)])
def test_fused_add_options(rng, dtype, gemma, round_once):
    check_fused_add_rms_norm(rng, dtype, 4, 5125, gemma=gemma, round_once=round_once)
    check_fused_add_rms_norm(rng, dtype, 4, 4096, gemma=gemma, round_once=round_once,
                             offsets={"input": 1, "residual": 2})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, off", [(5120, 0), (5125, 3), (20000, 1)])
def test_layer_norm_in_place(rng, dtype, hidden, off):
    check_layer_norm(rng, dtype, 3, hidden, offsets={"input": off}, in_place=True)


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
    assert plan.plan_fused_add_rms_norm("float16", 4097).block == plan.plan_rms_norm("float16", 4097).block
    assert np.array_equal(bits(got_x), bits(want))
    ref, _ = reference.fused_add_rms_norm_ref(x, r, w, 1e-6)
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

"""gated_rms_norm_backward without a GPU: the twin against the float64 formula (both orders, groups, every weight
kind, every alignment), the dweight sums in the norm backward's fixed order, the plan, the kernels compiled by NVRTC
for sm_90 without spills, and the raw-pointer call's refusals naming the bad argument."""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes, precompile
from pyrms.ops import registry
from pyrms.ops._norm_backward.twin import chunk_sums_twin, sum_partials_twin
from pyrms.ops.gated_rms_norm import plan as g_plan
from pyrms.ops.gated_rms_norm.twin import (gated_rms_norm_backward_ref, gated_rms_norm_backward_twin,
                                           sigmoid_twin, silu_twin)
from tests.support.kernel_resources import assert_no_spills, compile_with_report

DTYPES = ["bfloat16", "float16", "float32"]
# Each dtype's rounding: the twin's dx and dz within a few of its ulps of float64's (relative to the largest).
ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -23}


def _operands(rng, dtype, rows, hidden, weight):
    dt = dtypes.get(dtype)
    x = rng.uniform(-2, 2, (rows, hidden)).astype(dt.numpy)
    z = rng.uniform(-12, 12, (rows, hidden)).astype(dt.numpy)
    dy = rng.uniform(-1, 1, (rows, hidden)).astype(dt.numpy)
    w = None if weight == "none" else rng.uniform(-1, 1, hidden).astype(
        np.float32 if weight == "float32" else dt.numpy)
    return dy, x, z, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("hidden, group_size", [(7, None), (256, 64), (264, 88), (1030, None)])
@pytest.mark.parametrize("weight", ["same", "float32", "none"])
def test_twin_is_the_formula(rng, dtype, norm_before_gate, hidden, group_size, weight):
    """dx and dz within a few roundings of the dtype of float64's formula, dweight within fp32's sum of the rows'
    terms; each in its dtype, at a misaligned row and weight."""
    if weight == "float32" and dtype == "float32":
        pytest.skip("an fp32 weight beside fp32 rows is the rows' own dtype")
    dy, x, z, w = _operands(rng, dtype, 45, hidden, weight)
    got = gated_rms_norm_backward_twin(dy, x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate,
                                       row_phases=3, weight_phase=1)
    want = gated_rms_norm_backward_ref(dy, x, z, w, 1e-5, group_size=group_size, norm_before_gate=norm_before_gate)
    for name, g, r in zip(("dx", "dz"), got, want):
        assert g.dtype == x.dtype and g.shape == x.shape, name
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=0, atol=8 * ULP[dtype] * np.abs(r).max(),
                                   err_msg=name)
    if w is None:
        assert got[2] is None and want[2] is None
    else:
        assert got[2].dtype == w.dtype and got[2].shape == (hidden,)
        scale = np.abs(want[2]).max()
        np.testing.assert_allclose(got[2].astype(np.float64), want[2], rtol=0,
                                   atol=(ULP[dtypes.get(w.dtype).name] + 64 * 2.0 ** -23) * scale)


def test_the_gate_is_silu_and_its_derivative():
    """sigmoid_twin within 2 fp32 ulps of float64's, 0 below z = -87; silu_twin = z * sigmoid_twin exactly."""
    z = np.linspace(-100, 100, 20001, dtype=np.float32)
    sg = sigmoid_twin(z)
    want = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    small = z < -87
    assert (sg[small] == 0).all()
    np.testing.assert_allclose(sg[~small], want[~small], rtol=2 * 2.0 ** -23, atol=0)
    np.testing.assert_array_equal(silu_twin(z), z * sg)


@pytest.mark.parametrize("norm_before_gate", [True, False])
def test_a_batch_is_its_rows_in_the_fixed_order(rng, norm_before_gate):
    """Each row alone gives its dx and dz bits and, as dweight (fp32: one term, exactly), its terms; the batch's
    dweight is those terms summed by chunk_sums_twin and sum_partials_twin (the norm backward's order), for the
    plan's chunk by the row count and for a forced one."""
    dy, x, z, w = _operands(rng, "bfloat16", 150, 96, "float32")
    rows = [gated_rms_norm_backward_twin(dy[r:r + 1], x[r:r + 1], z[r:r + 1], w, 1e-6, group_size=32,
                                         norm_before_gate=norm_before_gate, chunk_rows=1) for r in range(150)]
    terms = np.stack([row[2] for row in rows])
    p = g_plan.plan_gated_rms_norm_backward("bfloat16", 96, 32, weight_dtype="float32")
    for chunk in (None, 16):
        dx, dz, dweight = gated_rms_norm_backward_twin(dy, x, z, w, 1e-6, group_size=32,
                                                       norm_before_gate=norm_before_gate, chunk_rows=chunk)
        np.testing.assert_array_equal(dx.view(np.uint16), np.concatenate([row[0] for row in rows]).view(np.uint16))
        np.testing.assert_array_equal(dz.view(np.uint16), np.concatenate([row[1] for row in rows]).view(np.uint16))
        want = sum_partials_twin(chunk_sums_twin(terms, chunk or p.chunk_for(150)))
        np.testing.assert_array_equal(dweight.view(np.uint32), want.view(np.uint32))
    assert p.chunk_for(150) == 4


def test_plan():
    """Blocks and folds of RMSNorm's backward and the forward for the group, one row per block while the (row,
    group) blocks are few, a workspace row per chunk then, sums in shared memory; the unit holds both orders."""
    p = g_plan.plan_gated_rms_norm_backward("bf16", 8192, 1024, weight_dtype="float32")
    assert (p.groups, p.block) == (8, 32) and p.fold == g_plan.plan_gated_rms_norm("bf16", 1024).block
    assert p.rows_per_block(512) == 1 and p.rows_per_block(513) == p.chunk_for(513)
    assert p.workspace_bytes(512) == 4 * 512 * p.ws_stride and p.ws_stride == 8200
    assert p.workspace_bytes(4096) == 4 * -(-4096 // p.chunk_for(4096)) * p.ws_stride
    assert p.shared_bytes == 4 * 1032 and p.grad_dtype is dtypes.FLOAT32
    assert p.group == ("pyrms::gated_rms_norm_backward_kernel<__nv_bfloat16, true, float>",
                       "pyrms::gated_rms_norm_backward_kernel<__nv_bfloat16, false, float>",
                       "pyrms::sum_partials_kernel<float>")
    none = g_plan.plan_gated_rms_norm_backward("fp32", 4096, 4096, norm_before_gate=False, weight_dtype="none")
    assert none.workspace_bytes(10 ** 6) == 0 and none.shared_bytes == 0 and none.grad_dtype is None
    assert none.expression == "pyrms::gated_rms_norm_backward_kernel<float, false, void>" and len(none.group) == 2


@pytest.mark.parametrize("args, message", [
    ((100, 30), "group_size must divide hidden_size: got hidden_size=100, group_size=30"),
    ((65536 * 2, 1), "at most 65535 groups a row \\(a grid dimension\\), got hidden_size / group_size = 131072"),
])
def test_plan_refuses(args, message):
    with pytest.raises(ValueError, match=message):
        g_plan.plan_gated_rms_norm_backward("bf16", *args)


def test_kernels_compile_for_sm_90_without_spills(tmp_path, monkeypatch):
    """Every dtype and weight kind, both orders, and the sums: no spills, no stack; PDL's wait before any memory
    access; 16-byte loads and stores; a correctly rounded division and square root, the sigmoid's reciprocal the
    hardware's approximate one refined (no rcp.rn)."""
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    spec = registry.get("gated_rms_norm_backward")
    names = tuple(dict.fromkeys(e for dt in DTYPES for options in spec.option_sets(dtypes.get(dt))
                                for e in g_plan.plan_gated_rms_norm_backward(dt, 64, 64, **options).group))
    assert len(names) == 19
    prog = compile_with_report("gated_rms_norm_backward.cu", names)
    functions = assert_no_spills(prog, names)
    for expression, lowered in prog.lowered_names.items():
        fn = functions[lowered]
        assert fn.waits_before_memory(), expression
        if "backward_kernel" in expression:
            assert fn.widths(True)[16] >= 1 and fn.widths(False)[16] >= 1, expression
    assert "sqrt.rn.f32" in prog.ptx and "div.rn.f32" in prog.ptx
    assert "rcp.approx.ftz.f32" in prog.ptx and "rcp.rn.f32" not in prog.ptx


def test_precompile_lists_its_units():
    units = precompile.every_unit(["gated_rms_norm_backward"])
    assert sorted(u.label for u in units) == sorted(
        f"gated_rms_norm_backward.cu {dt}{w}" for dt in DTYPES
        for w in ("", " weight=none", *((" weight=float32",) if dt != "float32" else ())))


BASE = dict(grad_x=0x10000, grad_z=0x20000, grad_weight=0x30000, grad_output=0x40000, x=0x50000, z=0x60000,
            weight=0x70000)


@pytest.mark.parametrize("change, error, message", [
    (dict(grad_weight=None), ValueError, "grad_weight is required with a weight"),
    (dict(weight=None), ValueError, "grad_weight was given, but weight is None"),
    (dict(group_size=100), ValueError, "hidden_size=1024 is not a multiple of group_size=100"),
    (dict(weight_dtype="float16"), ValueError, "weight dtype must be bfloat16 \\(the input's\\) or float32"),
    (dict(eps=-1.0), ValueError, "epsilon"),
    (dict(x=0x50001), ValueError, "x pointer 0x50001 is not aligned to 2 bytes"),
    (dict(grad_x=0x50000), ValueError, "grad_x and x overlap"),
    (dict(norm_before_gate=1), TypeError, "norm_before_gate"),
])
def test_raw_pointer_refusals_name_the_argument(change, error, message):
    """Checked before the driver is asked for anything: each refusal names the argument and what is allowed."""
    args = {**BASE, **change}
    options = {k: args.pop(k) for k in ("group_size", "weight_dtype", "eps", "norm_before_gate") if k in args}
    eps = options.pop("eps", 1e-6)
    with pytest.raises(error, match=message):
        pyrms.gated_rms_norm_backward(args["grad_x"], args["grad_z"], args["grad_weight"], args["grad_output"],
                                      args["x"], args["z"], args["weight"], eps, num_tokens=4, hidden_size=1024,
                                      **options)

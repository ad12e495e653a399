"""Mixed dtypes on the CPU: the twin's rounding rules on hand-made values, the plans and
compile units of an fp32 output and of LayerNorm's fp32 weight and bias, and the PTX of the new kernels
(16-byte stores of the fp32 output, two per 32-byte vector). docs/numerics.md, "Mixed dtypes", states the
rules checked here."""
import ml_dtypes
import numpy as np
import pytest

from pyrms import compiler, dtypes, precompile, reference
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

BF16 = ml_dtypes.bfloat16
F32 = np.float32


def test_fp32_out_is_the_unrounded_product_of_the_rounded_normalized_value():
    """Default rounding: out = float(round_T(x * inv)) * w in fp32 (Hugging Face LLaMA with an fp32 weight:
    ``weight * hidden.to(input_dtype)`` promoted to fp32); round_once: x * inv * w, never rounded."""
    x = np.array([[1.0, 3.0, -7.0, 0.1]], dtype=BF16)
    w = np.array([1.0, 1.0 / 3.0, 0.7, -2.5], dtype=F32)  # fp32 weights that bf16 cannot hold
    xf = x.astype(F32)
    inv = reference.inv_rms_twin(np.array([np.sum(xf * xf, dtype=F32)]), 4, 0.0)  # 4 elements: one order
    xn = xf * inv[:, None]
    got = reference.scale_twin(xf, inv, w, "bf16", out_dtype="float32")
    assert got.dtype == F32
    assert np.array_equal(got, xn.astype(BF16).astype(F32) * w)
    assert not np.array_equal(got, (xn * w))  # the intermediate rounding is visible in fp32
    once = reference.scale_twin(xf, inv, w, "bf16", round_once=True, out_dtype="float32")
    assert np.array_equal(once, xn * w)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("round_once", [False, True])
@pytest.mark.parametrize("gemma", [False, True])
def test_round_T_of_the_fp32_out_is_the_T_out(rng, dtype, round_once, gemma):
    """Both outputs come from one fp32 product, so rounding the fp32 one to T gives the T one bit for bit."""
    dt = dtypes.get(dtype)
    x = rng.uniform(-4, 4, (6, 777)).astype(dt.numpy)
    for w in (rng.uniform(-1, 1, 777).astype(F32), rng.uniform(-1, 1, 777).astype(dt.numpy), None):
        if w is None and gemma:
            continue
        kw = dict(block=rms_plan.plan_rms_norm(dt, 777).block, row_phases=np.arange(6) % 8, gemma=gemma,
                  round_once=round_once)
        low = rms_twin.rms_norm_twin(x, w, 1e-6, **kw)
        high = rms_twin.rms_norm_twin(x, w, 1e-6, out_dtype="float32", **kw)
        assert high.dtype == F32 and low.dtype == dt.numpy
        assert np.array_equal(high.astype(dt.numpy).view(np.uint16), low.view(np.uint16))


def test_fused_add_fp32_out_normalizes_the_rounded_sum(rng):
    x, r = (rng.uniform(-2, 2, (3, 64)).astype(BF16) for _ in range(2))
    w = rng.uniform(-1, 1, 64).astype(F32)
    out, total = fused_twin.fused_add_rms_norm_twin(x, r, w, 1e-6, block=32, out_dtype="float32")
    assert total.dtype == BF16  # the residual stays in the rows' dtype
    assert np.array_equal(out, rms_twin.rms_norm_twin(total, w, 1e-6, block=32, out_dtype="float32"))


def test_layer_norm_fp32_gamma_beta_and_out(rng):
    """y = ((x - mean) * inv) * w + b in fp32 with fp32 w and b read exactly, rounded once to the output."""
    x = np.array([[1.0, 2.0, 4.0, -8.0]], dtype=BF16)
    w = np.array([1.0 / 3.0, 0.7, 1.1, -0.9], dtype=F32)
    b = np.array([0.1, -0.2, 1e-3, 5.0], dtype=F32)
    xf = x.astype(F32)
    mean = np.sum(xf, dtype=F32) / F32(4)
    d = xf - mean
    inv = F32(1) / np.sqrt(np.sum(d * d, dtype=F32) / F32(4) + F32(1e-5))
    want = d * inv * w + b
    got = ln_twin.layer_norm_twin(x, w, b, 1e-5, block=32, out_dtype="float32")
    assert got.dtype == F32 and np.array_equal(got, want)
    assert np.array_equal(ln_twin.layer_norm_twin(x, w, b, 1e-5, block=32), want.astype(BF16))


def test_plans_and_expressions():
    p = rms_plan.plan_rms_norm("bf16", 5120, out_dtype="float32")
    assert p.out == "float32" and p.out_dtype is dtypes.FLOAT32 and p.align_mask == 31
    assert p.expression.endswith(", __nv_bfloat16, float>")  # W spelled out before O
    assert rms_plan.plan_rms_norm("fp16", 5120, weight_dtype="float32", out_dtype="float32").expression.endswith(
        ", float, float>")
    assert rms_plan.plan_rms_norm("bf16", 128, weight_dtype="none", out_dtype="float32").nd_expression.endswith(
        ", void, float>")
    assert rms_plan.plan_rms_norm("bf16", 64, out_dtype="bf16") == rms_plan.plan_rms_norm("bf16", 64)
    assert rms_plan.plan_rms_norm("float32", 64, out_dtype="float32").out == "same"
    f = fused_plan.plan_fused_add_rms_norm("bf16", 769, out_dtype="float32")
    assert f.expression.startswith("pyrms::fused_add_rms_norm_out_kernel<__nv_bfloat16,")
    assert fused_plan.plan_fused_add_rms_norm("bf16", 769).kernel == "fused_add_rms_norm_kernel"
    ln = ln_plan.plan_layer_norm("bf16", 769, weight_dtype="float32", out_dtype="float32")
    assert ln.param_dtype is dtypes.FLOAT32 and ln.expression.endswith(", float, float>")
    assert not any("backward" in name for name in ln.group)  # the mixed units are the forward's only
    with pytest.raises(ValueError, match="out_dtype must be bfloat16 \\(the input's\\) or float32, got float16"):
        rms_plan.plan_rms_norm("bf16", 8, out_dtype="float16")
    with pytest.raises(ValueError, match="out_dtype must be float32 \\(the input's\\) or float32, got bfloat16"):
        ln_plan.plan_layer_norm("float32", 8, out_dtype="bf16")


def test_units_of_mixed_dtypes():
    u = precompile.unit("rms_norm", "bf16", 5120, weight_dtype="float32", out_dtype="float32")
    assert str(u) == "rms_norm.cu bfloat16 weight=float32 out=float32"
    assert u.names == rms_plan.plan_rms_norm("bf16", 5120, weight_dtype="float32", out_dtype="float32").group
    assert str(precompile.unit("layer_norm", "fp16", 7, weight_dtype="float32")) == "layer_norm.cu float16 weight=float32"
    assert precompile.unit("layer_norm", "fp16", 7, out_dtype="float16") == precompile.unit("layer_norm", "fp16", 7)
    with pytest.raises(ValueError, match="rms_norm_backward has no out_dtype"):
        precompile.unit("rms_norm_backward", "bf16", 8, out_dtype="float32")


def _ptx(source: str, names) -> str:
    program = compiler.compile_source(source, arch="sm_90", name_expressions=tuple(names), want_ptx=True,
                                      use_cache=False)
    return program.ptx.decode() if isinstance(program.ptx, (bytes, bytearray)) else program.ptx


@pytest.mark.parametrize("op", ["rms_norm", "fused_add", "layer_norm"])
def test_fp32_out_kernels_store_16_bytes(op):
    """An fp32 output vector (8 values beside bf16 rows) is two 16-byte stores, not eight 4-byte ones."""
    if op == "rms_norm":
        p = rms_plan.plan_rms_norm("bf16", 5120, weight_dtype="float32", out_dtype="float32")
    elif op == "fused_add":
        p = fused_plan.plan_fused_add_rms_norm("fp16", 5120, out_dtype="float32")
    else:
        p = ln_plan.plan_layer_norm("bf16", 5120, weight_dtype="float32", out_dtype="float32")
    ptx = _ptx(p.source, [p.expression])
    wide = [line for line in ptx.splitlines() if line.strip().startswith("st.global") and ".v4." in line]
    assert wide, f"{p.expression}: no 16-byte global store"


@pytest.mark.parametrize("semantics", [dict(sum_precision="fp32"), dict(residual_dtype="float32")])
def test_fp32_out_with_the_fp32_sum_is_refused_by_name(rng, semantics):
    """The fp32-sum kernel writes the normalized row over the input (of its dtype): an fp32 out of its own is
    the rounded sum's only; the plan, the unit, the twin and the ptx_dump variant refuse it by name."""
    message = "out_dtype=float32 beside bfloat16 rows is offered with sum_precision='rounded' only"
    with pytest.raises(ValueError, match=message):
        fused_plan.plan_fused_add_rms_norm("bf16", 769, out_dtype="float32", **semantics)
    with pytest.raises(ValueError, match=message):
        precompile.unit("fused_add_rms_norm", "bf16", 769, out_dtype="float32", **semantics)
    x = rng.uniform(-2, 2, (2, 16)).astype(BF16)
    r = x.astype(F32) if semantics.get("residual_dtype") else x
    with pytest.raises(ValueError, match="an fp32 out_dtype takes sum_precision='rounded'"):
        fused_twin.fused_add_rms_norm_twin(x, r, None, 1e-6, block=32, sum_precision="fp32", out_dtype="float32")
    # float32 rows: one semantics, and an fp32 out is their own dtype (written in place)
    assert fused_plan.plan_fused_add_rms_norm("float32", 769, out_dtype="float32", sum_precision="fp32").out == "same"
    # the rounded sum with an fp32 out and the fp32 sum without one still plan their kernels
    assert fused_plan.plan_fused_add_rms_norm("bf16", 769, out_dtype="float32").kernel == "fused_add_rms_norm_out_kernel"
    assert fused_plan.plan_fused_add_rms_norm("bf16", 769, **semantics).kernel == "fused_add_rms_norm_fp32_sum_kernel"


def test_case_matrix_names_the_mixed_output_out_kind():
    """The row ops' fp32 output is the case option out_kind (out_dtype stays the quantizing ops'); the checker
    gets it as out_dtype, fused add gets an 'out' operand of its own, an fp32 out counts 8 offsets."""
    from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
    from tests.support import case_matrix, testing

    c = case_matrix.case("fused_add_rms_norm", "bf16", 3, 769, offsets={"out": 7}, out_kind="float32")
    assert str(c) == "fused_add_rms_norm-bfloat16-3x769-out+7-out_kind=float32"
    check, kwargs = testing.checker_call(c)
    assert check is check_fused_add_rms_norm and kwargs["out_dtype"] == "float32"
    assert kwargs["offsets"] == {"out": 7}
    assert testing.checker_call(case_matrix.case("rms_norm", "bf16", 3, 8))[1]["out_dtype"] is None
    assert case_matrix.pointers("fused_add_rms_norm", out_kind="float32") == ("input", "residual", "out", "weight")
    assert case_matrix.vector_elements("bf16", "out", out_kind="float32") == 8
    assert case_matrix.vector_elements("bf16", "bias", weight="float32") == 4
    with pytest.raises(ValueError, match=r"unknown operands \['out'\]"):
        case_matrix.case("fused_add_rms_norm", "bf16", 3, 769, offsets={"out": 7})
    q = case_matrix.case("rms_norm_quant", "bf16", 3, 769)
    assert testing.checker_call(q)[1]["out_dtype"] == "float8_e4m3fn"

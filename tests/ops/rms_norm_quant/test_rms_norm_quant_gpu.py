"""pyrms.rms_norm_quant and fused_add_rms_norm_quant on the GPU: bitwise equality with the twin (quantized
output, per-token scales, updated residual) on every alignment of every pointer (the scale arrays included),
hidden sizes with tails, strided rows, NaN/inf inputs, both launch shapes; guards and inputs untouched.

A NaN written in another bit pattern than the twin's (0x7F e4m3fn, 0x7E e5m2: docs/numerics.md) fails
test_nan_and_inf_inputs with the byte values printed."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from tests.ops.rms_norm_quant.cases import check_rms_norm_quant as run_case

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]
MODES = ["static", "per_token"]


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_pointer_misaligned_by_every_offset(rng, dtype, out_dtype, mode, variant):
    n = dtypes.get(dtype).vec_elems
    for hidden in (7, 769, 5125):
        for off in range(n):
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, variant=variant, offsets={"input": off})
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, variant=variant, offsets={"weight": off})
            # out at x's phase: the store takes the held vectors' y (held_y), with a prefix where off > 0
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, variant=variant, offsets={"input": off, "out": off})
        for off in range(16):  # the output's bytes: every phase of its 16-byte vector
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, variant=variant, offsets={"out": off})
        for off in range(4):  # the fp32 scales (per-token's output, or the device scale)
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, variant=variant, offsets={"scale": off},
                     device_scale=mode == "static")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_each_pointer_misaligned(rng, dtype, out_dtype, mode):
    n = dtypes.get(dtype).vec_elems
    for hidden in (9, 5125):
        for off in range(n):
            for name in ("input", "residual", "weight"):
                run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, fused=True, offsets={name: off})
        for off in (1, 3, 7, 8, 15):
            run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, fused=True, offsets={"out": off},
                     variant="many")
        run_case(rng, dtype, 3, hidden, out_dtype, mode=mode, fused=True, offsets={"scale": 1})


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 5, 7, 8, 9, 31, 769, 4096, 5120, 5125, 8192, 16384, 32776, 65537])
def test_hidden_sizes(rng, dtype, out_dtype, hidden):
    for mode in MODES:
        run_case(rng, dtype, 3, hidden, out_dtype, mode=mode)
        run_case(rng, dtype, 2, hidden, out_dtype, mode=mode, offsets={"input": 1, "weight": 1, "out": 3},
                 variant="many")
        run_case(rng, dtype, 2, hidden, out_dtype, mode=mode, fused=True, offsets={"residual": 1, "out": 5})


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, in_stride, out_stride", [(5120, 5123, 5131), (769, 1001, 771), (16, 17, 19),
                                                           (4096, 4104, 4096 + 16)])
def test_row_strides(rng, dtype, out_dtype, hidden, in_stride, out_stride):
    for mode in MODES:
        strides = {"input": in_stride, "out": out_stride}
        run_case(rng, dtype, 7, hidden, out_dtype, mode=mode, strides=strides)
        run_case(rng, dtype, 300, hidden, out_dtype, mode=mode, strides=strides)  # past FEW_ROWS
        run_case(rng, dtype, 5, hidden, out_dtype, mode=mode, fused=True,
                 strides={**strides, "residual": in_stride + 2}, offsets={"input": 1, "out": 2})


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_inputs(rng, dtype, out_dtype):
    for mode in MODES:
        for fused in (False, True):
            run_case(rng, dtype, 4, 769, out_dtype, mode=mode, fused=fused, specials=True)
            run_case(rng, dtype, 4, 5125, out_dtype, mode=mode, fused=fused, specials=True, variant="many")


@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_ub(rng, dtype, out_dtype):
    for ub in (0.5, "device"):
        run_case(rng, dtype, 4, 5125, out_dtype, mode="per_token", scale_ub=ub, offsets={"scale_ub": 3})
        run_case(rng, dtype, 4, 769, out_dtype, mode="per_token", scale_ub=ub, fused=True, specials=True)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_round_input_and_device_scale(rng, dtype, out_dtype):
    for mode in MODES:
        run_case(rng, dtype, 4, 5125, out_dtype, mode=mode, round_input=True)
        run_case(rng, dtype, 300, 4096, out_dtype, mode=mode, round_input=True, fused=True)
    run_case(rng, dtype, 4, 5120, out_dtype, device_scale=True, offsets={"scale": 2})
    run_case(rng, dtype, 300, 5120, out_dtype, device_scale=True, fused=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows_and_pdl_off(rng, dtype):
    run_case(rng, dtype, 20001, 9, "float8_e4m3fn", mode="per_token", strides={"input": 11, "out": 13})
    run_case(rng, dtype, 2048, 5120, "int8", mode="per_token", fused=True, pdl=False)


# --- per group ---------------------------------------------------------------------------------------
# (group, hidden): one group, a few groups of 64 (a misaligned row splits every group boundary inside a
# vector), DeepSeek's 7168 in groups of 128, and the most groups a row may have (the quant plan's MAX_GROUPS).
GROUP_SHAPES = [(64, 64), (64, 192), (128, 1408), (128, 7168), (64, 65536)]


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_per_group_each_pointer_misaligned(rng, dtype, out_dtype, variant):
    """Every input phase moves the group boundaries against the split (prefix, body vectors crossing a
    boundary, tail); the scales, row- and column-major, at every fp32 misalignment."""
    n = dtypes.get(dtype).vec_elems
    for group, hidden in ((64, 192), (128, 1408)):
        def case(**options):
            run_case(rng, dtype, 3, hidden, out_dtype, mode="per_group", group_size=group, variant=variant, **options)
        for off in range(n):
            case(offsets={"input": off})
            case(offsets={"weight": off})
            case(offsets={"input": off, "out": off})  # held vectors' y stored, vectors crossing group boundaries
        for off in range(16):
            case(offsets={"out": off})
        for off in range(4):
            case(offsets={"scale": off})
            case(offsets={"scale": off, "input": 1}, column_major=True)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_per_group_fused_shapes_and_layouts(rng, dtype, out_dtype):
    n = dtypes.get(dtype).vec_elems
    for group, hidden in GROUP_SHAPES:
        for fused in (False, True):
            run_case(rng, dtype, 3, hidden, out_dtype, mode="per_group", group_size=group, fused=fused)
            run_case(rng, dtype, 2, hidden, out_dtype, mode="per_group", group_size=group, fused=fused,
                     offsets={"input": 1, "residual": n - 1, "weight": 1, "out": 3}, variant="many", ue8m0=True)
        run_case(rng, dtype, 5, hidden, out_dtype, mode="per_group", group_size=group, column_major=True,
                 strides={"scale": 8}, fused=True, offsets={"residual": 1})  # DeepGEMM's rows padded to 4
    for off in range(n):
        run_case(rng, dtype, 3, 1408, out_dtype, mode="per_group", group_size=128, fused=True,
                 offsets={"residual": off, "input": (off + 1) % n})


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_per_group_strides_specials_and_many_rows(rng, dtype, out_dtype):
    strides = {"input": 1408 + 3, "out": 1408 + 5}
    for column_major, scale_stride in ((False, 11 + 2), (True, 300 + 4)):
        run_case(rng, dtype, 7, 1408, out_dtype, mode="per_group", group_size=128, column_major=column_major,
                 strides={**strides, "scale": scale_stride})
        run_case(rng, dtype, 300, 1408, out_dtype, mode="per_group", group_size=128, column_major=column_major,
                 strides={**strides, "scale": scale_stride}, offsets={"input": 1})  # past FEW_ROWS
    for fused in (False, True):
        for ue8m0 in (False, True):
            run_case(rng, dtype, 4, 192, out_dtype, mode="per_group", group_size=64, fused=fused, specials=True,
                     ue8m0=ue8m0)
            run_case(rng, dtype, 4, 7168, out_dtype, mode="per_group", fused=fused, specials=True, ue8m0=ue8m0,
                     variant="many", offsets={"input": 1, "residual": 1})
    run_case(rng, dtype, 1000, 128, out_dtype, mode="per_group", group_size=64, column_major=True, pdl=False)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_per_group_round_input(rng, dtype):
    run_case(rng, dtype, 4, 7168, "float8_e4m3fn", mode="per_group", round_input=True, ue8m0=True,
             offsets={"input": 3})
    run_case(rng, dtype, 300, 1408, "float8_e4m3fn", mode="per_group", round_input=True, fused=True,
             column_major=True)


# --- the unquantized output beside the quantized one (norm_out) ---------------------------------------
ALL_MODES = [("static", None), ("per_token", None), ("per_group", 64)]


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("mode, group", ALL_MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_out_at_every_phase(rng, dtype, mode, group, variant):
    """norm_out is rms_norm's output bit for bit, at every phase against x's (its own split: the held
    vectors' y where it shares x's phase, y made from x re-read otherwise) and out's, both roundings."""
    n = dtypes.get(dtype).vec_elems
    for hidden in (192, 5120 + 64 * (dtype != "float32")):  # a tail beside 2-byte rows where phases differ
        for off in range(n):
            for round_input in ((False, True) if dtype != "float32" else (False,)):
                run_case(rng, dtype, 3, hidden, "float8_e4m3fn", mode=mode, group_size=group, variant=variant,
                         norm_out=True, round_input=round_input, offsets={"norm_out": off})
            run_case(rng, dtype, 3, hidden, "int8", mode=mode, group_size=group, variant=variant, norm_out=True,
                     offsets={"norm_out": off, "input": off, "out": 2 * off})


@pytest.mark.parametrize("mode, group", ALL_MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_out_fused_strided_and_specials(rng, dtype, mode, group):
    """After the residual add (the rounded sum normalized), with row strides, NaN/inf rows, many rows,
    the aligned few-row kernel (every pointer aligned), and pdl off."""
    opts = dict(mode=mode, group_size=group, norm_out=True)
    for fused in (False, True):
        run_case(rng, dtype, 3, 1408, "float8_e5m2", fused=fused, offsets={"residual": 1, "norm_out": 1}, **opts)
        run_case(rng, dtype, 7, 1408, "float8_e4m3fn", fused=fused, strides={"input": 1411, "norm_out": 1408 + 24},
                 **opts)
        run_case(rng, dtype, 300, 1408, "int8", fused=fused, strides={"norm_out": 1417}, offsets={"input": 1},
                 **opts)
        run_case(rng, dtype, 4, 5120, "float8_e4m3fn", fused=fused, specials=True, **opts)
        run_case(rng, dtype, 4, 5120, "float8_e4m3fn", fused=fused, variant="few", **opts)  # ALIGNED
    run_case(rng, dtype, 2048, 5120, "float8_e4m3fn", fused=True, pdl=False, **opts)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_out_beside_device_scales(rng, dtype):
    """norm_out is the last pointer after a device scale or scale_ub: each lands where the kernel reads it."""
    for fused in (False, True):
        run_case(rng, dtype, 4, 769, "float8_e4m3fn", device_scale=True, norm_out=True, fused=fused,
                 offsets={"scale": 1, "norm_out": 1})
        run_case(rng, dtype, 4, 769, "float8_e4m3fn", mode="per_token", scale_ub="device", norm_out=True,
                 fused=fused, offsets={"scale_ub": 2, "scale": 1})


# --- the fused add's fp32 sum (sum_precision="fp32": FlashInfer's fused_add_rmsnorm_quant) ------------------------


@pytest.mark.parametrize("variant", ["few", "many"])
@pytest.mark.parametrize("mode, group", ALL_MODES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fp32_sum_each_pointer_misaligned(rng, dtype, mode, group, variant):
    """The fp32 sum at every phase of each row operand: the tree split at the input's boundaries, the sums pass 2
    does not hold rebuilt from input + residual at the outputs' splits, the residual stored after them."""
    n = dtypes.get(dtype).vec_elems
    opts = dict(mode=mode, group_size=group, variant=variant, fused=True, sum_precision="fp32")
    for hidden in ((192, 7168) if mode == "per_group" else (9, 5125)):
        for off in range(n):
            for name in ("input", "residual", "weight"):
                run_case(rng, dtype, 3, hidden, "float8_e4m3fn", offsets={name: off}, **opts)
            run_case(rng, dtype, 3, hidden, "int8", offsets={"input": off, "residual": n - 1 - off, "out": 2 * off},
                     **opts)
            run_case(rng, dtype, 3, hidden, "float8_e5m2", norm_out=True, round_input=off % 2 == 1,
                     offsets={"norm_out": off, "residual": off}, **opts)
        for off in (1, 3, 7, 8, 15):
            run_case(rng, dtype, 3, hidden, "float8_e4m3fn", offsets={"out": off}, **opts)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fp32_sum_sizes_strides_and_specials(rng, dtype, out_dtype):
    """Hidden sizes from 1 to 65537, row strides, NaN/inf rows, many rows (past FEW_ROWS, and 20001), a device
    scale and scale_ub, round_input, per group's scale layouts, pdl off."""
    fp8 = out_dtype != "int8"
    for mode in MODES:
        opts = dict(mode=mode, fused=True, sum_precision="fp32")
        for hidden in (1, 5, 8, 31, 769, 4096, 5120, 8192, 16384, 32776, 65537):
            run_case(rng, dtype, 2, hidden, out_dtype, offsets={"residual": 1, "out": 5}, **opts)
        run_case(rng, dtype, 7, 5120, out_dtype, strides={"input": 5123, "residual": 5131, "out": 5127}, **opts)
        run_case(rng, dtype, 300, 769, out_dtype, strides={"input": 1001, "residual": 771, "out": 800}, **opts)
        run_case(rng, dtype, 5, 5125, out_dtype, specials=True, offsets={"input": 1}, **opts)
        run_case(rng, dtype, 4, 4096, out_dtype, round_input=True, variant="few", **opts)  # ALIGNED
        run_case(rng, dtype, 20001, 9, out_dtype, offsets={"residual": 1}, pdl=False, **opts)
    run_case(rng, dtype, 3, 769, out_dtype, device_scale=True, fused=True, sum_precision="fp32",
             offsets={"scale": 1})
    if fp8:
        run_case(rng, dtype, 3, 769, out_dtype, mode="per_token", scale_ub="device", fused=True,
                 sum_precision="fp32", offsets={"scale_ub": 2, "scale": 1})
    for column_major in (False, True):
        run_case(rng, dtype, 5, 7168, out_dtype, mode="per_group", fused=True, sum_precision="fp32", specials=True,
                 column_major=column_major, ue8m0=column_major, offsets={"input": 1, "scale": 1},
                 strides={"input": 7171, "scale": 8 if column_major else 57})


def test_fp32_sum_of_float32_rows_is_the_rounded_sum(rng):
    """float32 rows have one semantics: sum_precision="fp32" launches the rounded sum's kernel, the same bits."""
    for mode, group in ALL_MODES:
        run_case(rng, "float32", 3, 768, "float8_e4m3fn", mode=mode, group_size=group, fused=True,
                 sum_precision="fp32", offsets={"residual": 1})


# --- out and the scales as arrays ---------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("out_dtype", QUANT)
def test_torch_out_and_scales_match_raw_pointers(out_dtype, fused):
    """out and the scales as torch tensors (out's dtype sets out_dtype; N-D rows; per-group scales row-major
    with padded rows, and column-major through .t() of a padded buffer) write the bits of the raw-pointer call
    on the same inputs, the scales' padding left as it was."""
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(21)
    x = (torch.rand((2, 3, 1408), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
    r = (torch.rand((2, 3, 1408), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
    w = (torch.rand(1408, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    rows, groups = 6, 1408 // 128
    nan = float("nan")
    static = torch.tensor([0.01], device="cuda")
    # mode's options; the scale buffers of the array call and of the pointer call; the array view, and its
    # pointer call's scale_stride
    modes = [
        (dict(mode="static"), (static, static), lambda b: b, {}),
        (dict(mode="per_token"), tuple(torch.full((rows, 1), nan, device="cuda") for _ in range(2)), lambda b: b, {}),
        (dict(mode="per_group"), tuple(torch.full((rows, groups + 2), nan, device="cuda") for _ in range(2)),
         lambda b: b[:, :groups], dict(scale_stride=groups + 2)),
        (dict(mode="per_group", column_major_scales=True, ue8m0=True),
         tuple(torch.full((groups, 8), nan, device="cuda") for _ in range(2)), lambda b: b.t()[:rows],
         dict(scale_stride=8)),
    ]
    if out_dtype != "int8":
        modes.append((dict(mode="per_token", scale_ub=torch.tensor([0.5], device="cuda")),
                      tuple(torch.full((rows,), nan, device="cuda") for _ in range(2)), lambda b: b, {}))
    for options, (array_buffer, pointer_buffer), view, pointer_options in modes:
        outs = [torch.empty(x.shape, dtype=getattr(torch, out_dtype), device="cuda") for _ in range(2)]
        for out in outs:
            out.view(torch.uint8).fill_(0xA5)
        residuals = [r.clone(), r.clone()]
        ub = options.get("scale_ub")
        rows_of = (lambda res: (x, res)) if fused else (lambda res: (x,))
        op = pyrms.fused_add_rms_norm_quant if fused else pyrms.rms_norm_quant
        op(outs[0], *rows_of(residuals[0]), w, 1e-6, scale=view(array_buffer), **options)
        pointers = [t.data_ptr() for t in (outs[1], *rows_of(residuals[1]), w)]
        op(*pointers, 1e-6, rows, 1408, scale=pointer_buffer.data_ptr(), out_dtype=out_dtype, dtype="bfloat16",
           **dict(options, **pointer_options, **({} if ub is None else {"scale_ub": ub.data_ptr()})))
        torch.cuda.synchronize()
        label = f"{out_dtype} {options}"
        assert torch.equal(outs[0].view(torch.uint8), outs[1].view(torch.uint8)), label
        assert torch.equal(array_buffer.view(torch.int32), pointer_buffer.view(torch.int32)), label  # NaN padding
        assert torch.equal(residuals[0], residuals[1]), label


def test_pyrms_tensors_and_uint8_storage_match_raw_pointers(rng):
    """pyrms Tensors for the input, the weight and per-token scales, beside a torch.uint8 out holding what
    out_dtype names (as vLLM keeps fp8), write the raw-pointer call's bits."""
    torch = _torch()
    x = rng.uniform(-2, 2, (5, 768)).astype(dtypes.BFLOAT16.numpy)
    w = rng.uniform(-1, 1, 768).astype(dtypes.BFLOAT16.numpy)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw, \
            pyrms.Tensor.from_numpy(np.full(5, np.nan, np.float32)) as scales:
        q = torch.full((5, 768), 0xA5, dtype=torch.uint8, device="cuda")
        q_raw = q.clone()
        scales_raw = torch.full((5,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        pyrms.rms_norm_quant(q, dx, dw, 1e-6, scale=scales, mode="per_token", out_dtype="float8_e5m2")
        pyrms.rms_norm_quant(q_raw.data_ptr(), dx.ptr, dw.ptr, 1e-6, 5, 768, scale=scales_raw.data_ptr(),
                             mode="per_token", out_dtype="float8_e5m2")
        driver.synchronize()
        assert torch.equal(q, q_raw)
        assert np.array_equal(scales.to_numpy().view(np.uint32), scales_raw.cpu().numpy().view(np.uint32))

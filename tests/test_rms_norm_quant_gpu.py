"""pyrms.rms_norm_quant and fused_add_rms_norm_quant on the GPU: bitwise equality with the twin (quantized
output, per-token scales, updated residual) on every alignment of every pointer (the scale arrays included),
hidden sizes with tails, strided rows, NaN/inf inputs, both launch shapes; guards and inputs untouched.

A NaN written in another bit pattern than the twin's (0x7F e4m3fn, 0x7E e5m2: docs/numerics.md) fails
test_nan_and_inf_inputs with the byte values printed."""
import pytest

from pyrms import dtypes
from pyrms.testing import check_rms_norm_quant as run_case

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

"""pyrms.layer_norm_quant on the GPU: bitwise equality with the twin (layer_norm_quant_twin: layer_norm's fp32 values,
or its output with round_input, through rms_norm_quant's static step) over every element misalignment of input,
weight and bias and every byte phase of out, strided rows, hidden sizes with prefixes and tails, one and many rows
(both row variants), every input and output dtype, fp32 gamma and beta, no weight or bias, NaN/inf and constant
rows, a scale given as a value, a device pointer or a one-element array; the output poisoned with a byte the
expected output does not hold, its guard bands and gaps between rows, the inputs and the device scale checked
untouched (tests.support.testing's guarded operands and run_checked: whole allocations compared bit for bit)."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from tests.ops.layer_norm.cases import check_layer_norm_quant
from tests.support.case_matrix import ROW_VARIANTS
from tests.support.testing import allocate, closing, guarded, phases, run_checked

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_misalignment(rng, dtype, out_dtype):
    """Each of input, weight and bias at every element phase of its 16 bytes, out at every byte phase, against
    the others aligned and against the others misaligned; both row variants (the few-row kernel loads the weights
    early, at out's split)."""
    n = dtypes.get(dtype).vec_elems
    for variant in ROW_VARIANTS:
        for hidden in (7, 769, 5125):
            for name, phases in (("input", n), ("weight", n), ("bias", n), ("out", 16)):
                for off in range(phases):
                    check_layer_norm_quant(rng, dtype, 3, hidden, out_dtype, offsets={name: off}, variant=variant)
            for off in range(16):
                check_layer_norm_quant(rng, dtype, 2, hidden, out_dtype, variant=variant, offsets={
                    "input": off % n, "out": off, "weight": (off * 3 + 1) % n, "bias": (off * 5 + 2) % n})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("round_input", [False, True])
def test_fp32_gamma_and_beta(rng, dtype, round_input):
    """FlashInfer's combination (fp32 gamma and beta beside 2-byte rows), misaligned fp32 parameters, every output."""
    for out_dtype in QUANT:
        for variant in ROW_VARIANTS:
            for off in range(4):
                check_layer_norm_quant(rng, dtype, 3, 5120, out_dtype, weight="float32", round_input=round_input,
                                       offsets={"weight": off, "bias": (off + 1) % 4, "input": off * 2 + 1,
                                                "out": off * 3}, variant=variant)
            check_layer_norm_quant(rng, dtype, 3, 769, out_dtype, weight="float32", round_input=round_input,
                                   variant=variant)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 8, 9, 769, 4096, 5120, 5125, 16384, 65537])
def test_hidden_sizes_one_and_many_rows(rng, dtype, out_dtype, hidden):
    many = 700 if hidden <= 5125 else 40
    for rows in (1, many):
        check_layer_norm_quant(rng, dtype, rows, hidden, out_dtype)
    check_layer_norm_quant(rng, dtype, 5, hidden, out_dtype, offsets={"input": 1, "out": 3}, round_input=True)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_and_options(rng, dtype, out_dtype):
    """Row strides that move each row's phase, on either side or both (the gaps stay poisoned), without a weight
    or a bias, and round_input; both row variants."""
    for variant in ROW_VARIANTS:
        for hidden, x_stride, out_stride in ((769, 771, None), (769, None, 777), (769, 800, 801), (4096, 4101, 4099),
                                             (9, 17, 13), (1, 3, 5), (5125, 5133, 5141)):
            strides = {name: s for name, s in (("input", x_stride), ("out", out_stride)) if s is not None}
            check_layer_norm_quant(rng, dtype, 9, hidden, out_dtype, strides=strides, variant=variant)
            check_layer_norm_quant(rng, dtype, 9, hidden, out_dtype, strides=strides, offsets={"input": 1, "out": 5},
                                   variant=variant, round_input=True)
        for weight, bias in (("none", True), ("same", False), ("none", False)):
            check_layer_norm_quant(rng, dtype, 4, 769, out_dtype, weight=weight, bias=bias, variant=variant,
                                   offsets={"input": 1, "out": 2})


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_and_constant_rows(rng, dtype, out_dtype):
    """A row holding NaN or ±inf is NaN throughout (the one positive NaN byte in float8, 0 in int8); an all-zero
    row normalizes to the bias alone."""
    for variant in ROW_VARIANTS:
        for hidden in (3, 9, 769, 5125):
            check_layer_norm_quant(rng, dtype, 4, hidden, out_dtype, specials=True, variant=variant)
            check_layer_norm_quant(rng, dtype, 4, hidden, out_dtype, specials=True, offsets={"input": 1, "out": 7},
                                   round_input=True, variant=variant)


@pytest.mark.parametrize("out_dtype", QUANT)
def test_scale_kinds_and_extremes(rng, out_dtype):
    """The scale as a device pointer (every fp32 phase) or a one-element array reads the same bits as the value;
    scales that saturate nearly everything or round nearly everything to zero."""
    for dtype in DTYPES:
        for off in range(4):
            check_layer_norm_quant(rng, dtype, 3, 769, out_dtype, device_scale=True, offsets={"scale": off})
        check_layer_norm_quant(rng, dtype, 3, 769, out_dtype, scale_array=True, offsets={"scale": 1})
        for scale in (2.0 ** -20, 1e-3, 1.0, 3.0e4):
            check_layer_norm_quant(rng, dtype, 3, 769, out_dtype, scale=float(np.float32(scale)))
            check_layer_norm_quant(rng, dtype, 3, 769, out_dtype, scale=float(np.float32(scale)), device_scale=True)


@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_and_streams(rng, pdl):
    with driver.Stream() as stream:
        for dtype in DTYPES:
            for out_dtype in QUANT:
                check_layer_norm_quant(rng, dtype, 300, 4096, out_dtype, offsets={"input": 2, "out": 2}, stream=stream,
                                       pdl=pdl)


@pytest.mark.parametrize("out_dtype", QUANT)
def test_round_input_quantizes_layer_norms_output(rng, out_dtype):
    """round_input=True is static_quant of layer_norm's output, byte for byte, on the device: the same statistics,
    the same rounding, the same static step (FlashInfer's kernel quantizes that rounded value)."""
    dt, hidden, rows = dtypes.BFLOAT16, 5125, 6
    x = allocate(rng, dt, rows, hidden, misalign=3)
    w, b = (allocate(rng, dtypes.FLOAT32, 1, hidden, misalign=1) for _ in range(2))
    y = allocate(rng, dt, rows, hidden, poison=True)
    fused, apart = (guarded(np.uint8, rows, hidden, 0, None, 0xFF) for _ in range(2))
    with closing(x, w, b, y, fused, apart):
        pyrms.layer_norm(y.ptr, x.ptr, w.ptr, b.ptr, 1e-6, rows, hidden, dtype=dt, input_stride=x.stride,
                         out_stride=y.stride, weight_dtype="float32")
        pyrms.static_quant(apart.ptr, y.ptr, rows, hidden, scale=0.01, out_dtype=out_dtype, dtype=dt,
                           input_stride=y.stride)
        pyrms.layer_norm_quant(fused.ptr, x.ptr, w.ptr, b.ptr, 1e-6, rows, hidden, scale=0.01, out_dtype=out_dtype,
                               dtype=dt, input_stride=x.stride, weight_dtype="float32", round_input=True)
        driver.synchronize()
        assert np.array_equal(fused.device_values(), apart.device_values())


def test_the_twin_is_what_the_checks_compare(rng):
    """The checker is able to fail: another scale's bytes, or the other rounding's, differ somewhere."""
    dt, qt = dtypes.BFLOAT16, dtypes.quantized("float8_e4m3fn")
    x = allocate(rng, dt, 2, 769)
    for scale, round_input in ((0.02, False), (0.01, True)):
        block = ln_plan.plan_layer_norm_quant(dt, 769, qt, weight=False, bias=False).block
        q = ln_twin.layer_norm_quant_twin(x.values(), None, None, 1e-5, 0.01, qt, block=block, row_phases=phases(x),
                                          round_input=False).view(np.uint8)
        out = guarded(np.uint8, 2, 769, 0, None, 0xFF)
        with closing(out), pytest.raises(AssertionError, match="layer_norm_quant.*out: .* elements differ"):
            run_checked("layer_norm_quant wrong", lambda: pyrms.layer_norm_quant(
                out.ptr, x.ptr, None, None, 1e-5, 2, 769, scale=scale, round_input=round_input),
                outputs={"out": (out, q)}, inputs={"input": x})
    x.close()

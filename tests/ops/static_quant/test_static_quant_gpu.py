"""pyrms.static_quant on the GPU: bitwise equality with the twin (static_quant_twin, vLLM's
static_scaled_fp8_quant / static_scaled_int8_quant) over every element misalignment of input and out, strided
rows, hidden sizes with prefixes and tails, one and many rows, every input and output dtype, NaN/inf inputs,
a scale given as a value, a device pointer or a one-element array; the output poisoned with a byte the
expected output does not hold, its guard bands and gaps between rows, the input and the device scale checked
untouched (tests.support.testing's guarded operands and run_checked: whole allocations compared bit for bit)."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops.static_quant import plan as sq_plan
from pyrms.ops.static_quant.twin import static_quant_twin
from tests.ops.static_quant.cases import check_static_quant
from tests.support.testing import allocate, closing, guarded, run_checked

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]


def run_case(rng, dtype, rows, hidden, out_dtype, *, x_off=0, out_off=0, x_stride=None, out_stride=None,
             scale=None, scale_kind="value", scale_off=0, specials=False, stream=None, pdl=None):
    """tests.ops.static_quant.cases.check_static_quant with the offsets and strides by keyword; scale_kind:
    "value" (a float), "pointer" (a device pointer, scale_off fp32 elements past a 16-byte boundary) or "array" (a
    one-element float32 pyrms.Tensor there)."""
    if scale_kind not in ("value", "pointer", "array"):
        raise ValueError(f"scale_kind must be 'value', 'pointer' or 'array', got {scale_kind!r}")
    strides = {name: s for name, s in (("input", x_stride), ("out", out_stride)) if s is not None}
    check_static_quant(rng, dtype, rows, hidden, out_dtype,
                       offsets={"input": x_off, "out": out_off, "scale": scale_off}, strides=strides, scale=scale,
                       device_scale=scale_kind == "pointer", scale_array=scale_kind == "array", specials=specials,
                       stream=stream, pdl=pdl)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_misalignment_of_input_and_out(rng, dtype, out_dtype):
    """Every pair of (input's element phase in its 16 bytes, out's byte phase in its 16 bytes): the relative
    phase picks the load width (16 bytes where they share it), out's own the prefix and tail."""
    n = dtypes.get(dtype).vec_elems
    for x_off in range(n):
        for out_off in range(16):
            run_case(rng, dtype, 3, 769, out_dtype, x_off=x_off, out_off=out_off)
    for hidden in (7, 9, 5125):
        for off in range(16):
            run_case(rng, dtype, 2, hidden, out_dtype, x_off=off % n, out_off=off)
            run_case(rng, dtype, 2, hidden, out_dtype, x_off=(off * 3 + 1) % n, out_off=off)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 8, 9, 769, 4096, 5125, 65537])
def test_hidden_sizes_one_and_many_rows(rng, dtype, out_dtype, hidden):
    many = 700 if hidden <= 5125 else 40
    for rows in (1, many):
        run_case(rng, dtype, rows, hidden, out_dtype)
    run_case(rng, dtype, 5, hidden, out_dtype, x_off=1, out_off=3)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows(rng, dtype, out_dtype):
    """Row strides that move each row's phase (odd gaps), on either side or both; the gaps must stay poisoned."""
    for hidden, x_stride, out_stride in ((769, 771, None), (769, None, 777), (769, 800, 801), (4096, 4101, 4099),
                                         (9, 17, 13), (1, 3, 5), (5125, 5125 + 8, 5125 + 16)):
        run_case(rng, dtype, 9, hidden, out_dtype, x_stride=x_stride, out_stride=out_stride)
        run_case(rng, dtype, 9, hidden, out_dtype, x_off=1, out_off=5, x_stride=x_stride, out_stride=out_stride)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_and_zero_rows(rng, dtype, out_dtype):
    """NaN (the one positive NaN byte in float8, 0 in int8), ±inf (±qmax), an all-zero row."""
    for hidden in (3, 9, 769, 5125):
        run_case(rng, dtype, 4, hidden, out_dtype, specials=True)
        run_case(rng, dtype, 4, hidden, out_dtype, specials=True, x_off=1, out_off=7)


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_kinds_and_extremes(rng, dtype, out_dtype):
    """The scale as a device pointer (every fp32 phase) or a one-element array reads the same bits as the value;
    scales that saturate nearly everything, or round nearly everything to zero, and subnormal ones."""
    for off in range(4):
        run_case(rng, dtype, 3, 769, out_dtype, scale_kind="pointer", scale_off=off)
    run_case(rng, dtype, 3, 769, out_dtype, scale_kind="array", scale_off=1)
    for scale in (2.0 ** -20, 1e-3, 1.0, 3.0e4, 1e-40, 3.0e38):
        run_case(rng, dtype, 3, 769, out_dtype, scale=float(np.float32(scale)))
        run_case(rng, dtype, 3, 769, out_dtype, scale=float(np.float32(scale)), scale_kind="pointer")


@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_and_streams(rng, pdl):
    with driver.Stream() as stream:
        for dtype in DTYPES:
            for out_dtype in QUANT:
                run_case(rng, dtype, 300, 4096, out_dtype, x_off=2, out_off=2, stream=stream, pdl=pdl)


def test_the_twin_is_what_the_checks_compare(rng):
    """The checker is able to fail: a launch of another output dtype's bytes, or another scale, differs."""
    with pytest.raises(AssertionError, match="static_quant.*out: .* elements differ"):
        dt, qt = dtypes.BFLOAT16, dtypes.quantized("float8_e4m3fn")
        x = allocate(rng, dt, 2, 64)
        q = static_quant_twin(x.values(), 0.01, qt).view(np.uint8)
        out = guarded(np.uint8, 2, 64, 0, None, 0xFF)
        with closing(x, out):
            run_checked("static_quant wrong scale", lambda: pyrms.static_quant(out.ptr, x.ptr, 2, 64, scale=0.02),
                        outputs={"out": (out, q)}, inputs={"input": x})
    assert sq_plan.plan_static_quant(dt, 64, qt).block == 32

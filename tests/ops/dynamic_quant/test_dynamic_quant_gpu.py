"""pyrms.dynamic_quant on the GPU: out and the scales bitwise equal to the twin (dynamic_quant_twin: vLLM's
scaled_fp8_quant and scaled_int8_quant without a scale, per tensor or per token, and per_token_group_quant_fp8)
in every mode, over every element misalignment of input and out, misaligned scales, strided rows, hidden sizes
with prefixes and tails, one and many rows (per tensor past the maxima launch's blocks), every input and output
dtype, NaN/inf inputs and all-zero rows, scale_ub as a value or a device pointer, per-group scales in both
layouts, padded, with UE8M0, scales as arrays; the output poisoned with a byte the expected output does not hold
and the scales with NaN, guard bands and gaps checked untouched (tests.support.testing's guarded operands and
run_checked: whole allocations compared bit for bit)."""
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from pyrms.ops.dynamic_quant.twin import dynamic_quant_twin
from tests.ops.dynamic_quant.cases import MODES, check_dynamic_quant
from tests.support.testing import allocate, closing, guarded, run_checked

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
QUANT = ["float8_e4m3fn", "float8_e5m2", "int8"]


def run_case(rng, dtype, rows, hidden, out_dtype, mode, *, x_off=0, out_off=0, scale_off=0, x_stride=None,
             out_stride=None, **options):
    """tests.ops.dynamic_quant.cases.check_dynamic_quant with the offsets and strides by keyword."""
    strides = {name: s for name, s in (("input", x_stride), ("out", out_stride)) if s is not None}
    check_dynamic_quant(rng, dtype, rows, hidden, out_dtype, mode,
                        offsets={"input": x_off, "out": out_off, "scale": scale_off}, strides=strides, **options)


def _hidden(mode: str, hidden: int) -> int:
    """hidden rounded up to whole groups of 128 per group (the others take any size)."""
    return -(-hidden // 128) * 128 if mode == "per_group" else hidden


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_misalignment_of_input_and_out(rng, dtype, out_dtype, mode):
    """Every pair of (input's element phase in its 16 bytes, out's byte phase in its 16 bytes): the relative
    phase picks the load width, out's own the prefix and tail, and per group the vectors that cross a group."""
    n = dtypes.get(dtype).vec_elems
    hidden = _hidden(mode, 769)
    for x_off in range(n):
        for out_off in range(16):
            run_case(rng, dtype, 3, hidden, out_dtype, mode, x_off=x_off, out_off=out_off)
    for h in (7, 9, 5125) if mode != "per_group" else (128, 256, 5120):
        for off in range(16):
            run_case(rng, dtype, 2, h, out_dtype, mode, x_off=(off * 3 + 1) % n, out_off=off, scale_off=off % 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_sizes_one_and_many_rows(rng, dtype, out_dtype, mode):
    """Per tensor past MAX_AMAX_BLOCKS rows (the maxima blocks loop over the rows) and at one row."""
    for hidden in (1, 7, 8, 9, 769, 4096, 5125, 65537) if mode != "per_group" else (128, 640, 4096, 7168, 65536):
        many = 2500 if hidden <= 769 else (700 if hidden <= 7168 else 40)
        for rows in (1, many):
            run_case(rng, dtype, rows, hidden, out_dtype, mode)
        run_case(rng, dtype, 5, hidden, out_dtype, mode, x_off=1, out_off=3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_nan_inf_and_zero_rows(rng, dtype, out_dtype, mode):
    """Row strides that move each row's phase, on either side or both (the gaps stay poisoned); NaN (skipped by
    the maxima, the one NaN byte in float8, 0 in int8), ±inf, an all-zero row (the scale's floor)."""
    for hidden, x_stride, out_stride in ((769, 771, None), (769, None, 777), (4096, 4101, 4099), (9, 17, 13)):
        hidden = _hidden(mode, hidden)
        run_case(rng, dtype, 9, hidden, out_dtype, mode, x_stride=max(x_stride or 0, hidden + 3),
                 out_stride=max(out_stride or 0, hidden + 5), x_off=1, out_off=5)
        run_case(rng, dtype, 4, hidden, out_dtype, mode, specials=True)
        run_case(rng, dtype, 4, hidden, out_dtype, mode, specials=True, x_off=1, out_off=7)


@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_per_token_scale_ub(rng, dtype, out_dtype):
    """scale_ub as a value (tight enough to clamp most rows: they saturate) or read from a device pointer at every
    fp32 phase."""
    for ub in (1e-3, 0.5, 3.0e4):
        run_case(rng, dtype, 7, 769, out_dtype, "per_token", scale_ub=ub, specials=True)
    for off in range(4):
        check_dynamic_quant(rng, dtype, 5, 769, out_dtype, "per_token", offsets={"scale_ub": off, "input": 1},
                            scale_ub="device")


@pytest.mark.parametrize("out_dtype", QUANT)
@pytest.mark.parametrize("dtype", DTYPES)
def test_per_group_layouts(rng, dtype, out_dtype):
    """Groups of 64 and 128; scales row-major and column-major, dense and padded (the padding stays NaN), with and
    without UE8M0, at misaligned scales; and passed as arrays of either layout."""
    for group_size in (64, 128):
        for column_major in (False, True):
            for ue8m0 in (False, True):
                for rows, stride in ((5, None), (5, 8 if column_major else 1280 // group_size + 3)):
                    run_case(rng, dtype, rows, 1280, out_dtype, "per_group", group_size=group_size,
                             column_major=column_major, ue8m0=ue8m0, scale_stride=stride, x_off=1, out_off=3,
                             scale_off=1)
            run_case(rng, dtype, 6, 1280, out_dtype, "per_group", group_size=group_size, column_major=column_major,
                     scale_stride=8 if column_major else 24, scale_array=True)


@pytest.mark.parametrize("mode", ["per_tensor", "per_token"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scales_as_arrays(rng, dtype, mode):
    for out_dtype in QUANT:
        run_case(rng, dtype, 5, 769, out_dtype, mode, scale_array=True, scale_off=3)


@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_and_streams(rng, pdl):
    """On a stream of its own, with and without PDL: per tensor's three launches are ordered by it."""
    with driver.Stream() as stream:
        for dtype in DTYPES:
            for out_dtype in QUANT:
                for mode in MODES:
                    run_case(rng, dtype, 1500, 4096, out_dtype, mode, x_off=2, out_off=2, stream=stream, pdl=pdl)


def test_per_tensor_is_the_same_bits_on_every_call(rng):
    """The per-tensor scale is a maximum folded by atomics: repeated calls, each clearing it first, give the same
    bits (and a stale scale left by an earlier call never leaks into the next)."""
    x = allocate(rng, dtypes.BFLOAT16, 3000, 512, low=-3.0, high=3.0)
    q, s = dynamic_quant_twin(x.values(), "float8_e4m3fn", "per_tensor")
    with closing(x):
        for stale in (np.float32(1e30), np.float32(0.0), np.float32(1e-30)):
            out = guarded(np.uint8, 3000, 512, 0, None, 0xFF)
            sc = guarded(np.float32, 1, 1, 0, None, stale)
            with closing(out, sc):
                run_checked("dynamic_quant per_tensor repeat",
                            lambda: pyrms.dynamic_quant(out.ptr, x.ptr, 3000, 512, scale=sc.ptr, mode="per_tensor"),
                            outputs={"out": (out, q.view(np.uint8)), "scale": (sc, s[None])}, inputs={"input": x})


def test_the_twin_is_what_the_checks_compare(rng):
    """The checker is able to fail: per token's bytes and scales are not per tensor's."""
    x = allocate(rng, dtypes.BFLOAT16, 4, 256)
    q, s = dynamic_quant_twin(x.values(), "float8_e4m3fn", "per_tensor")
    out = guarded(np.uint8, 4, 256, 0, None, 0xFF)
    sc = guarded(np.float32, 1, 4, 0, None, np.nan)
    with closing(x, out, sc), pytest.raises(AssertionError, match="dynamic_quant wrong mode"):
        run_checked("dynamic_quant wrong mode",
                    lambda: pyrms.dynamic_quant(out.ptr, x.ptr, 4, 256, scale=sc.ptr, mode="per_token"),
                    outputs={"out": (out, q.view(np.uint8)), "scale": (sc, np.repeat(s, 4)[None])},
                    inputs={"input": x})

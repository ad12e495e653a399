"""The quantizing output step's twin (pyrms.reference.quantize_*), against float64 spellings of the formulas
in docs/numerics.md ("Quantized outputs") and on the edge cases the kernel must reproduce."""
import math

import numpy as np
import pytest

from pyrms import dtypes
from pyrms.ops.rms_norm_quant import plan as quant_plan
from pyrms.ops.rms_norm_quant import twin as quant_twin

F32 = np.float32
QTYPES = dtypes.QUANTIZED
FP8 = (dtypes.FLOAT8_E4M3FN, dtypes.FLOAT8_E5M2)
# (mantissa bits, smallest normal exponent) of each float8 type, for the independent rounding below.
FP8_FORMAT = {"float8_e4m3fn": (3, -6), "float8_e5m2": (2, -14)}


def f32(x):
    """A float64 computation's result rounded to float32: the correctly rounded fp32 operation for one
    +, *, / of float32 operands (53 >= 2*24 + 2 bits, so the double rounding is innocuous)."""
    return np.asarray(x, dtype=np.float64).astype(F32).astype(np.float64)


def round_fp8(v, qt):
    """Round float64 values to qt's grid, nearest even, in float64 (no ml_dtypes): step 2**(e - mantissa)."""
    mantissa, emin = FP8_FORMAT[qt.name]
    with np.errstate(divide="ignore"):
        e = np.maximum(np.floor(np.log2(np.abs(v))), emin)
    step = np.exp2(e - mantissa)
    return np.rint(v / step) * step


def expected(y, s, qt, *, divide):
    """q's bytes by the documented formula, computed in float64 with each fp32 operation rounded."""
    y64, s64 = np.asarray(y, np.float64), np.asarray(s, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = f32(y64 / s64) if divide else f32(y64 * f32(1.0 / s64))
    if qt.integer:
        z = np.clip(np.rint(z), -128, 127)
        return np.where(np.isnan(z), 0, z).astype(np.int8).view(np.uint8)
    z = round_fp8(np.clip(z, -float(qt.qmax), float(qt.qmax)), qt)
    return np.where(np.isnan(z), np.nan, z).astype(qt.numpy).view(np.uint8)  # exact: z is on the grid


def bits(q):
    return q.view(np.uint8)


def rows(seed, shape, spread=3.0):
    """float32 rows over several binades, like normalized values times a weight."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape))).astype(F32)


def test_constants_match_vllm():
    assert dtypes.FLOAT8_E4M3FN.qmax == 448 and dtypes.FLOAT8_E5M2.qmax == 57344 and dtypes.INT8.qmax == 127
    assert dtypes.INT8.qmin == -128 and dtypes.FLOAT8_E4M3FN.qmin == -448
    assert dtypes.FLOAT8_E4M3FN.min_scale == F32(1.0) / F32(448 * 512)
    assert dtypes.FLOAT8_E5M2.min_scale == F32(1.0) / F32(57344 * 512)
    assert dtypes.INT8.min_scale == F32(2.0 ** -23)


def test_quantized_dtypes_stay_out_of_the_storage_dtypes():
    for name in ("int8", "float8_e4m3fn", "float8_e5m2"):
        with pytest.raises(ValueError):
            dtypes.get(name)
    with pytest.raises(ValueError, match="allowed: float8_e4m3fn, float8_e5m2, int8"):
        dtypes.quantized("bfloat16")


class _TorchDtype:
    """What dtypes reads of a torch dtype (its module and its str), without torch."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


_TorchDtype.__module__ = "torch"


def test_quantized_dtypes_by_torch_dtype_and_typestr():
    assert [dtypes.quantized(_TorchDtype(q.name)) for q in QTYPES] == list(QTYPES)
    assert all(q.itemsize == 1 for q in QTYPES)
    with pytest.raises(ValueError, match="quantized output dtype 'bfloat16' is not supported"):
        dtypes.quantized(_TorchDtype("bfloat16"))
    assert dtypes.quantized_from_typestr("|i1") is dtypes.quantized_from_typestr("<i1") is dtypes.INT8
    assert [dtypes.quantized_from_typestr(t) for t in ("|u1", "<V1", "|V1", "<f1")] == [None] * 4
    with pytest.raises(ValueError, match=r"array typestr '<f2' is not a quantized output type; allowed: '\|i1'"):
        dtypes.quantized_from_typestr("<f2")


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("scale", [0.013, 1.0, 3.0, 0.1])
def test_static_matches_float64(qt, scale):
    y = rows(1, (8, 512)) * F32(float(qt.qmax) * scale / 8)
    q = quant_twin.quantize_static(y, scale, qt)
    assert q.dtype == qt.numpy
    np.testing.assert_array_equal(bits(q), expected(y, F32(scale), qt, divide=qt.integer))


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("scale_ub", [None, 0.5])
def test_per_token_matches_float64(qt, scale_ub):
    if qt.integer and scale_ub is not None:
        pytest.skip("scale_ub is fp8-only (test_scale_ub_refused_for_int8)")
    y = rows(2, (16, 768))
    q, scales = quant_twin.quantize_per_token(y, qt, scale_ub)
    amax = np.nanmax(np.abs(y.astype(np.float64)), axis=1)
    if scale_ub is not None:
        amax = np.minimum(amax, f32(scale_ub))
    want_scales = np.maximum(f32(amax / float(qt.qmax)), float(qt.min_scale))
    assert scales.dtype == F32 and scales.shape == (16,)
    np.testing.assert_array_equal(scales.astype(np.float64), want_scales)
    np.testing.assert_array_equal(bits(q), expected(y, want_scales[:, None], qt, divide=not qt.integer))


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_per_token_absmax_element_reaches_qmax(qt):
    y = rows(3, (64, 300))
    q, _ = quant_twin.quantize_per_token(y, qt)
    top = np.argmax(np.abs(y), axis=1)
    peaks = q[np.arange(64), top].astype(np.float64)
    np.testing.assert_array_equal(np.abs(peaks), float(qt.qmax))


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("group", quant_plan.QUANT_GROUPS)
@pytest.mark.parametrize("ue8m0", [False, True])
def test_per_group_matches_float64(qt, group, ue8m0):
    y = rows(4, (5, 4 * group), spread=6.0)
    q, scales = quant_twin.quantize_per_group(y, qt, group, ue8m0=ue8m0)
    amax = np.abs(y.astype(np.float64)).reshape(5, 4, group).max(axis=2)
    want = np.maximum(f32(amax / float(qt.qmax)), float(qt.min_scale))
    if ue8m0:
        want = np.exp2(np.ceil(np.log2(want)))
    np.testing.assert_array_equal(scales.astype(np.float64), want)
    s = np.repeat(want, group, axis=1)
    np.testing.assert_array_equal(bits(q), expected(y, s, qt, divide=not qt.integer))


def test_ue8m0_scales_are_powers_of_two_at_or_above_the_fp32_scale():
    y = rows(5, (32, 1024), spread=10.0)
    _, fp32_scales = quant_twin.quantize_per_group(y, "float8_e4m3fn", 128)
    _, pow2 = quant_twin.quantize_per_group(y, "float8_e4m3fn", 128, ue8m0=True)
    assert np.all(pow2.view(np.uint32) & 0x7FFFFF == 0)
    assert np.all(pow2 >= fp32_scales) and np.all(pow2 < 2 * fp32_scales)
    exact = fp32_scales == np.exp2(np.round(np.log2(fp32_scales)))
    np.testing.assert_array_equal(pow2[exact], fp32_scales[exact])


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_column_major_scales_are_the_transposed_memory(qt):
    y = rows(6, (7, 512))
    q_row, s_row = quant_twin.quantize_per_group(y, qt, 128)
    q_col, s_col = quant_twin.quantize_per_group(y, qt, 128, column_major=True)
    np.testing.assert_array_equal(bits(q_row), bits(q_col))
    np.testing.assert_array_equal(s_row, s_col)
    assert s_row.flags.c_contiguous and not s_row.flags.f_contiguous
    assert s_col.flags.f_contiguous and not s_col.flags.c_contiguous
    # the bytes a kernel writes: scale (token t, group g) at g * rows + t
    raw = np.frombuffer(s_col.T.tobytes(), dtype=F32)
    assert raw[2 * 7 + 5] == s_row[5, 2] and raw[1] == s_row[1, 0]


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_all_zero_rows_and_groups_take_the_minimum_scale(qt):
    y = rows(7, (3, 256))
    y[1] = 0.0
    y[2, :128] = -0.0
    q, scales = quant_twin.quantize_per_token(y, qt)
    assert scales[1] == qt.min_scale and scales[0] > qt.min_scale
    assert not np.any(q[1].astype(np.float64))
    _, gscales = quant_twin.quantize_per_group(y, qt, 128)
    assert gscales[1, 0] == gscales[1, 1] == gscales[2, 0] == qt.min_scale
    q, _ = quant_twin.quantize_per_group(y, qt, 128)
    if not qt.integer:  # -0 / s = -0: the sign survives in fp8 (0x80), not in int8
        assert np.all(bits(q[2, :128]) == 0x80)


def written_nan(qt) -> int:
    """The byte a NaN output becomes: ml_dtypes' one fp8 NaN pattern; 0 in int8."""
    return 0 if qt.integer else int(bits(np.array([np.nan], F32).astype(qt.numpy))[0])


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_nan_is_skipped_by_the_scale_and_propagates_in_fp8(qt):
    y = rows(8, (2, 256))
    y[0, 10] = np.nan
    y[1, 3] = -np.nan
    q, scales = quant_twin.quantize_per_token(y, qt)
    np.testing.assert_array_equal(scales, quant_twin.quantize_per_token(np.where(np.isnan(y), 0, y).astype(F32), qt)[1])
    nan_bits = written_nan(qt)
    assert bits(q)[0, 10] == nan_bits and bits(q)[1, 3] == nan_bits  # one pattern, sign dropped
    assert quant_twin.quantize_static(y, 1.0, qt)[0, 10].view(np.uint8) == nan_bits


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_inf_row(qt):
    y = rows(9, (1, 128))
    y[0, 7] = np.inf
    y[0, 8] = -np.inf
    q, scales = quant_twin.quantize_per_token(y, qt)
    assert scales[0] == np.inf  # inf / qmax
    finite = np.delete(q[0], [7, 8]).astype(np.float64)
    assert not np.any(finite)  # finite / inf = 0
    nan = written_nan(qt)
    assert bits(q)[0, 7] == nan and bits(q)[0, 8] == nan  # inf / inf = NaN
    if not qt.integer:
        q, scales = quant_twin.quantize_per_token(y, qt, scale_ub=2.0)
        assert scales[0] == F32(2.0) / qt.qmax
        assert float(q[0, 7]) == qt.qmax and float(q[0, 8]) == -qt.qmax
    static = quant_twin.quantize_static(y, 1.0, qt)
    assert float(static[0, 7]) == qt.qmax and float(static[0, 8]) == qt.qmin


@pytest.mark.parametrize("qt, values, want", [
    (dtypes.FLOAT8_E4M3FN, [448, -448, 464, 470, 479.9, 480, 1e30], [448, -448, 448, 448, 448, 448, 448]),
    (dtypes.FLOAT8_E5M2, [57344, 61440, -61439, 1e30], [57344, 57344, -57344, 57344]),
    (dtypes.INT8, [127, 127.5, 126.5, -127.5, -128.5, -1e30, 2.5, -2.5, 3.5, 0.5], [127, 127, 126, -128, -128, -128, 2, -2, 4, 0]),
], ids=lambda v: getattr(v, "name", None))
def test_saturation_and_rounding_at_qmax(qt, values, want):
    # scale 1: the values reach the conversion unchanged. int8 rounds half to even (2.5 -> 2, not 3).
    q = quant_twin.quantize_static(np.array([values], F32), 1.0, qt)
    np.testing.assert_array_equal(q[0].astype(np.float64), np.array(want, np.float64))


def _ties(qt, scale, count):
    """float32 y near scale * m for `count` midpoints m between adjacent values of qt (each m * scale and its
    float32 neighbours up to 4 ulps away), where y / s and y * (1/s) can round to different sides."""
    if qt.integer:
        m = np.arange(count) - count // 2 + 0.5
    else:
        grid = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(qt.numpy).astype(np.float64)))
        grid = grid[np.isfinite(grid) & (grid <= float(qt.qmax))]
        m = ((grid[:-1] + grid[1:]) / 2)[-count:]
    centre = (m * scale).astype(F32).view(np.int32)
    return (centre[:, None] + np.arange(-4, 5, dtype=np.int32)).view(F32).reshape(1, -1)


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_static_operation_is_vllms(qt):
    """fp8 multiplies by the fp32 reciprocal, int8 divides; on midpoints the other spelling differs."""
    scale = F32(3.3)
    y = _ties(qt, float(scale), 100)
    q = bits(quant_twin.quantize_static(y, scale, qt))
    np.testing.assert_array_equal(q, expected(y, scale, qt, divide=qt.integer))
    assert np.any(q != expected(y, scale, qt, divide=not qt.integer))


@pytest.mark.parametrize("qt", QTYPES, ids=lambda q: q.name)
def test_dynamic_operation_is_vllms(qt):
    """Per-token and per-group: fp8 divides, int8 multiplies by the fp32 reciprocal."""
    y = np.concatenate([_ties(qt, 3.3, 127), np.array([[float(qt.qmax) * 3.3]], F32)], axis=1)
    y = np.pad(y, ((0, 0), (0, 128 - y.shape[1] % 128)))
    q, scales = quant_twin.quantize_per_token(y, qt)
    np.testing.assert_array_equal(bits(q), expected(y, scales[:, None], qt, divide=not qt.integer))
    assert np.any(bits(q) != expected(y, scales[:, None], qt, divide=qt.integer))
    q, scales = quant_twin.quantize_per_group(y, qt, 128)
    s = np.repeat(scales, 128, axis=1)
    np.testing.assert_array_equal(bits(q), expected(y, s, qt, divide=not qt.integer))


def test_scale_ub_clamps_only_above_it():
    y = rows(10, (4, 256))
    amax = np.abs(y).max(axis=1)
    ub = float(np.median(amax))
    q, scales = quant_twin.quantize_per_token(y, "float8_e4m3fn", scale_ub=ub)
    free_q, free_scales = quant_twin.quantize_per_token(y, "float8_e4m3fn")
    above = amax > F32(ub)
    assert above.any() and (~above).any()
    np.testing.assert_array_equal(scales[above], F32(ub) / F32(448))
    np.testing.assert_array_equal(scales[~above], free_scales[~above])
    np.testing.assert_array_equal(bits(q[~above]), bits(free_q[~above]))
    saturated = np.abs(y[above]) > F32(ub)
    assert saturated.any()
    np.testing.assert_array_equal(np.abs(q[above][saturated].astype(np.float64)), 448.0)


def test_scale_ub_refused_for_int8():
    with pytest.raises(ValueError, match="scale_ub applies to float8 outputs only"):
        quant_twin.quantize_per_token(rows(0, (1, 64)), "int8", scale_ub=1.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, 1e-46])
def test_bad_scales_refused(bad):
    with pytest.raises(ValueError, match="must be a finite float32 > 0"):
        quant_twin.quantize_static(rows(0, (1, 64)), bad, "float8_e4m3fn")
    with pytest.raises(ValueError, match="must be a finite float32 > 0"):
        quant_twin.quantize_per_token(rows(0, (1, 64)), "float8_e4m3fn", scale_ub=bad)


@pytest.mark.parametrize("group, hidden, message", [
    (128, 320, "group 128 does not divide hidden 320"),
    (64, 100, "group 64 does not divide hidden 100"),
    (32, 128, r"group must be one of \(64, 128\), got 32"),
])
def test_group_refusals(group, hidden, message):
    with pytest.raises(ValueError, match=message):
        quant_twin.quantize_per_group(rows(0, (2, hidden)), "int8", group)


def test_y_must_be_float32():
    with pytest.raises(TypeError, match="y must be a float32 array"):
        quant_twin.quantize_per_token(rows(0, (2, 64)).astype(np.float64), "int8")
    with pytest.raises(TypeError, match="y must be a float32 array"):
        quant_twin.quantize_static(np.zeros((2, 3, 64), F32), 1.0, "int8")


def test_per_group_worked_example_of_family_md():
    """docs/family.md's per-group example through the kernel twin: x = 1 then 2 in two groups of 64 (bf16, ε 0)."""
    x = np.array([1.0] * 64 + [2.0] * 64, dtype=dtypes.BFLOAT16.numpy)[None]
    w = np.ones(128, dtypes.BFLOAT16.numpy)
    twin = dict(block=32, mode="per_group", group=64)
    q, s = quant_twin.rms_norm_quant_twin(x, w, 0.0, "float8_e4m3fn", **twin)
    y = quant_twin.normalized_twin(x, w, 0.0, block=32)[0, [0, 64]]
    assert np.allclose(y, [0.6324555, 1.264911]) and np.array_equal(s[0], y / np.float32(448))
    assert np.all(q.astype(np.float32) == 448)
    q, s = quant_twin.rms_norm_quant_twin(x, w, 0.0, "float8_e4m3fn", ue8m0=True, **twin)
    assert np.array_equal(s, np.float32([[2.0**-9, 2.0**-8]])) and np.all(q.astype(np.float32) == 320)
    q, s = quant_twin.rms_norm_quant_twin(x, w, 0.0, "int8", **twin)
    assert np.all(q == 127) and np.allclose(s, [[0.00497996, 0.00995993]])
    with pytest.raises(ValueError, match="scale_ub applies to mode='per_token' only"):
        quant_twin.rms_norm_quant_twin(x, w, 0.0, "float8_e4m3fn", scale_ub=1.0, **twin)

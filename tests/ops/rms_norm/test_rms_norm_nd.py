"""The N-D layouts of rms_norm (pyrms/ops/_views.py, pyrms/ops/rms_norm/nd.py) and the packed plan, on the CPU:
collapsing, overlap and extent checks, the kernel's padded dimensions, the refusals of bad arguments."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from pyrms.ops import _row_plan as plan
from pyrms.ops import _views
from pyrms.ops.rms_norm import plan as rms_plan


def _rows_of(sizes, strides, hidden):
    """Every element offset of every row of a layout (row-major order)."""
    return [sum(i * s for i, s in zip(idx, strides)) + np.arange(hidden)
            for idx in itertools.product(*(range(n) for n in sizes))]


@pytest.mark.parametrize("shape,strides,keep,want", [
    ((4, 8), {"x": (8 * 128, 128)}, False, ((32,), {"x": (128,)})),            # contiguous: one stride
    ((4, 8), {"x": (80 * 128, 128)}, False, ((4, 8), {"x": (80 * 128, 128)})),  # a QKV slice: two
    ((4, 8), {"x": (1024, 128), "o": (128, 512)}, False, ((4, 8), {"x": (1024, 128), "o": (128, 512)})),
    ((1, 4, 1, 8), {"x": (0, 2048, 5, 128)}, False, ((4, 8), {"x": (2048, 128)})),  # size-1 dims dropped
    ((3, 4, 5), {"x": (20 * 64, 5 * 64, 64)}, True, ((3, 20), {"x": (20 * 64, 64)})),  # dim 0 kept
    ((1, 1), {"x": (9, 9)}, False, ((1,), {"x": (64,)})),                           # one row
])
def test_joint_lead(shape, strides, keep, want):
    assert _views.joint_lead(shape, strides, keep, 64) == want


def test_joint_lead_addresses_the_same_rows():
    rng = np.random.default_rng(0)
    for _ in range(200):
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(n) for n in rng.integers(1, 4, ndim))
        inner = 16
        strides = []
        for n in reversed(shape):  # contiguous-ish with random gaps, so some dims collapse and some not
            strides.append(inner if rng.random() < 0.5 else inner + int(rng.integers(1, 5)))
            inner = strides[-1] * n
        strides = tuple(reversed(strides))
        try:
            sizes, steps = _views.joint_lead(shape, {"x": strides}, False, 16)
        except ValueError as e:
            assert "at most 3" in str(e)
            continue
        assert [list(r) for r in _rows_of(sizes, steps["x"], 16)] == [list(r) for r in _rows_of(shape, strides, 16)]


def test_joint_lead_refuses_four_dimensions():
    with pytest.raises(ValueError, match="at most 3"):
        _views.joint_lead((2, 2, 2, 2), {"x": (1000, 300, 100, 20)}, False, 8)


@pytest.mark.parametrize("sizes,strides,overlap", [
    ((4, 8), (1024, 128), False), ((4, 8), (1024, 64), True), ((4, 8), (128, 512), False),
    ((4, 8), (0, 128), True), ((1, 8), (0, 128), False), ((3,), (127,), True), ((2, 3), (384, 128), False),
    ((2, 3), (383, 128), True),
])
def test_rows_overlap(sizes, strides, overlap):
    assert _views.rows_overlap(sizes, strides, 128) is overlap
    flat = np.concatenate(_rows_of(sizes, strides, 128))
    if not overlap:
        assert len(set(flat.tolist())) == flat.size


def test_kernel_dims_keep_the_outermost_index():
    assert _views.kernel_dims((5,), (7,)) == (1, 1, (7, 0, 0))
    assert _views.kernel_dims((5, 3), (70, 7)) == (1, 3, (70, 0, 7))
    assert _views.kernel_dims((5, 3, 2), (70, 7, 3)) == (3, 2, (70, 7, 3))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_packed_lanes_hold_every_body_vector(dtype):
    """lanes: 8 or 16 only where no alignment of the row leaves more body vectors (row_core.cuh's condition)."""
    dt = dtypes.get(dtype)
    for hidden in range(1, 2100, 7):
        p = rms_plan.plan_rms_norm(dt, hidden)
        if p.block != 32:
            assert p.lanes == 0 and p.nd_rows_per_block == 1
            continue
        most = max(plan.row_split(phase * dt.itemsize, hidden, dt.itemsize).vectors for phase in range(dt.vec_elems))
        lanes, cache = p.packed_shape
        positions = plan.packed_positions(lanes, cache)
        assert lanes in (8, 32) and (most <= lanes * positions or lanes * positions == 32)
        assert cache // positions == p.cache  # the plan's fold steps, held at each position
        assert p.nd_block % p.lanes == 0 and p.nd_rows_per_block == p.nd_block // p.lanes
        assert p.nd_expression in p.nd_group
        assert p.packed_shape in plan.PACKED_SHAPES


BAD = [
    (dict(num_tokens=(4, 8), hidden_size=128, input_stride=(2048, 128), out_stride=(1024, 64)), "overlap"),
    (dict(num_tokens=(4, 8, 2, 1), hidden_size=128), "1 to 3 leading sizes"),
    (dict(num_tokens=(4, 8), hidden_size=128, input_stride=(2048,)), r"tuple of 2 strides"),
    (dict(num_tokens=(4, 8), hidden_size=128, weight_stride=64), "weight_stride must be 0"),
    (dict(num_tokens=(4, 0), hidden_size=128), r"num_tokens\[1\] must be between"),
    (dict(num_tokens=(4, 8), hidden_size=128, input_stride=(-5, 128)), r"input_stride\[0\]"),
    (dict(num_tokens=(2**16, 2**16), hidden_size=128), "rows"),
    (dict(num_tokens=(4, 8), hidden_size=128, out_stride=(2**60, 128)), "2\\^59"),
    (dict(num_tokens=(4, 8), hidden_size=128, input_stride=(1024, 128), out_stride=(1024, 128)), "overlap"),
]


@pytest.mark.parametrize("kwargs,message", BAD)
def test_bad_nd_arguments_are_named(kwargs, message):
    """Refused before any driver call (the CPU has none): each names the culprit."""
    out, x, w = 1 << 20, (1 << 20) + 4096, 1 << 34  # the last case: out and input overlap (not in place)
    with pytest.raises(ValueError, match=message):
        pyrms.rms_norm(out, x, w, 1e-6, **kwargs)


def test_weightless_call_refuses_a_weight_stride():
    with pytest.raises(ValueError, match="weight_stride was given for weight=None"):
        pyrms.rms_norm(1 << 20, 1 << 30, None, 1e-6, (4, 8), 128, weight_stride=128)

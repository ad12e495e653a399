"""Launch planning (pure, CPU only)."""
import pytest

import pyrms

from pyrms import dtypes

from pyrms.ops import _row_plan as plan
from pyrms.ops.seed import plan_seed
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.rms_norm import plan as rms_plan


@pytest.mark.parametrize("address, hidden, itemsize, expected", [
    (0, 5120, 2, (0, 640, 0)),       # aligned bf16: all vectors
    (2, 5120, 2, (7, 639, 1)),       # one element past a boundary: 7 to the next one
    (14, 5120, 2, (1, 639, 7)),
    (0, 5125, 2, (0, 640, 5)),       # tail only
    (6, 5, 2, (5, 0, 0)),            # the prefix swallows a short row
    (4, 3, 4, (3, 0, 0)),
    (8, 1027, 4, (2, 256, 1)),
    (0, 1, 4, (0, 0, 1)),
])
def test_row_split(address, hidden, itemsize, expected):
    split = plan.row_split(address, hidden, itemsize)
    assert (split.prefix, split.vectors, split.tail) == expected
    assert split.tail_start + split.tail == hidden


@pytest.mark.parametrize("dtype, hidden, block, cache", [
    ("bfloat16", 1, 32, 1),
    ("bfloat16", 5, 32, 1),
    ("bfloat16", 256, 32, 1),       # 32 vectors: one each
    ("bfloat16", 264, 32, 2),
    ("bfloat16", 1024, 32, 4),
    ("bfloat16", 1032, 64, 4),      # 129 vectors: past one warp
    ("bfloat16", 4096, 128, 4),
    ("bfloat16", 5120, 160, 4),     # the H200's best for 16384x5120
    ("bfloat16", 5125, 192, 4),     # 641 vectors -> 161 threads -> 6 warps
    ("bfloat16", 8192, 256, 4),
    ("bfloat16", 16384, 512, 4),
    ("bfloat16", 16392, 1024, 0),   # past 512 threads x 4: re-read in pass 2
    ("bfloat16", 262144, 1024, 0),
    ("float32", 5120, 320, 4),
    ("float16", 769, 32, 4),
])
def test_block_and_cache(dtype, hidden, block, cache):
    p = rms_plan.plan_rms_norm(dtype, hidden)
    assert (p.block, p.cache) == (block, cache)
    assert p.block % 32 == 0 and 32 <= p.block <= 1024
    assert p.block <= plan.max_threads(p.cache)
    if p.cache:  # every 16-byte vector of any alignment fits in the registers of the block
        assert p.block * p.cache >= -(-hidden // dtypes.get(dtype).vec_elems)


def test_expression_names_every_option():
    p = rms_plan.plan_rms_norm("float16", 100, gemma=True, round_once=False)
    assert p.expression == "pyrms::rms_norm_kernel<__half, 1, 1, true, false, false, false>"
    assert p.latency_expression == "pyrms::rms_norm_kernel<__half, 1, 1, true, false, true, false>"
    assert p.aligned_latency_expression == "pyrms::rms_norm_kernel<__half, 1, 1, true, false, true, true>"
    assert p.expression in p.group == rms_plan.variant_group(dtypes.FLOAT16, True, False)
    assert p.latency_expression in p.group and p.aligned_latency_expression in p.group
    # every CACHE for many rows, every (CACHE, SPREAD) few-row shape, general and aligned
    assert len(set(p.group)) == 1 + len(plan.CACHE_CHOICES) + 2 * len(plan.FEW_ROW_SHAPES)
    assert all(", true, false, " in e for e in p.group)


@pytest.mark.parametrize("dtype, hidden, spread", [
    ("bfloat16", 256, 1),     # one vector per thread already
    ("bfloat16", 512, 2),     # 32 threads x 2 vectors -> 64 x 1
    ("bfloat16", 4096, 4),    # 128 x 4 -> 512 x 1
    ("bfloat16", 5120, 4),    # 160 x 4 -> 640 x 1
    ("bfloat16", 8192, 4),    # 256 x 4 -> 1024 x 1
    ("bfloat16", 16384, 2),   # 512 x 4 -> 1024 x 2: no more threads in a block
    ("bfloat16", 16392, 1),   # re-read rows (CACHE 0): 1024 threads already
    ("float32", 5120, 2),     # 320 x 4 -> 640 x 2
])
def test_few_row_shape(dtype, hidden, spread):
    for p in (rms_plan.plan_rms_norm(dtype, hidden), fused_plan.plan_fused_add_rms_norm(dtype, hidden),
              ln_plan.plan_layer_norm(dtype, hidden)):
        assert p.spread == spread and p.latency_block == spread * p.block <= plan.MAX_BLOCK
        assert (p.cache, p.spread) in plan.FEW_ROW_SHAPES and p.latency_expression in p.group
        assert f"<{dtypes.get(dtype).ctype}, {p.cache}, {spread}, " in p.latency_expression
        assert p.latency_block <= plan.max_threads(p.cache // spread)  # the kernel's launch bounds


@pytest.mark.parametrize("hidden", [5, 4096, 5125, 16392])
def test_launch_shape_does_not_depend_on_rows(monkeypatch, hidden):
    """Batch invariance: whatever the row count, pyrms.rms_norm launches a kernel of the same reduction
    tree (the same fold width F and register cache: the few-row kernel runs SPREAD * F threads, with
    SPREAD in its name, and loads its weights early) with one block per row, or, for many short rows,
    packed rows of the same fold. Recorded at the launch, with a stand-in for the kernels and the device."""
    from pyrms import driver, launch

    launches = []

    class Recorder:
        def __init__(self, expression):
            self.name = expression

    class StandInDevice:
        compute_capability = (9, 0)

        def __init__(self):
            self.prepared = {}  # the prepared launches, as a Device keeps them: none from other tests

    def record(self, kernel, grid, stream, *head):
        launches.append((kernel.name, grid, self.block))

    monkeypatch.setattr(launch, "get_kernel", lambda source, expression, *rest: Recorder(expression))
    device = StandInDevice()
    monkeypatch.setattr(driver, "selected_device", lambda: device)
    monkeypatch.setattr(driver._selected, "device", device)  # where the inlined prepared-launch lookup reads it
    monkeypatch.setattr(driver, "device_count", lambda: 1)  # one device: no placement check (ops/_placement)
    monkeypatch.setattr(launch.RowLaunch, "__call__", record)
    rows = (1, 5, plan.FEW_ROWS, plan.FEW_ROWS + 1, 70001)
    for n in rows:
        pyrms.rms_norm(1 << 20, 1 << 34, 1 << 40, 1e-6, n, hidden, dtype="bfloat16")
    p = rms_plan.plan_rms_norm("bfloat16", hidden)
    # one block per row; many short rows packed (rms_norm_nd_kernel), nd_rows_per_block rows per block
    per_block = [1 if n <= plan.FEW_ROWS or not p.lanes else p.nd_rows_per_block for n in rows]
    assert [grid for _, grid, _ in launches] == [-(-n // k) for n, k in zip(rows, per_block)]
    for (name, grid, block), n in zip(launches, rows):
        if "rms_norm_nd_kernel" in name:  # packed: the fold is one warp, LANES lanes per row
            dtype, cache, lanes, aligned, *flags = name.split("<")[1].rstrip(">").split(", ")
            assert (int(lanes), int(cache)) == p.packed_shape and p.block == 32
            assert int(cache) // plan.packed_positions(int(lanes), int(cache)) == p.cache  # each position's steps
            assert block == plan.PACKED_THREADS and n > plan.FEW_ROWS
        else:
            dtype, cache, spread, *flags = name.split("<")[1].rstrip(">").split(", ")
            assert (int(cache), block // int(spread)) == (p.cache, p.block)  # the tree: fold width and cache
        assert flags[:2] == ["false", "false"]  # gemma, round_once as asked
    # aligned pointers: the all-body few-row kernel where the hidden size is a multiple of the vector
    few = p.aligned_latency_expression if hidden % 8 == 0 else p.latency_expression
    assert {name for (name, _, _), n in zip(launches, rows) if n <= plan.FEW_ROWS} == {few}
    assert {name for (name, _, _), n in zip(launches, rows) if n > plan.FEW_ROWS} == {
        p.nd_expression if p.lanes else p.expression}


def test_seed_plan_matches_the_cpp_program():
    p = plan_seed("bfloat16", 5120)
    assert (p.vec_size, p.block) == (8, 640)
    assert p.expression == "transformer::rms_norm_kernel<__nv_bfloat16, 8, 5120, 2, 640>"
    assert plan_seed("bfloat16", 34).vec_size == 2  # gcd(8, 34), the seed's commented-out size
    with pytest.raises(ValueError, match="16384 / 8 = 2048 threads, more than the 1024"):
        plan_seed("bfloat16", 16384)


def test_packed_block_matches_the_kernels_launch_bounds():
    """rms_norm.cu's launch bounds for packed rows name the block plan.PACKED_THREADS launches: a larger
    block would fail at launch (CUDA_ERROR_INVALID_VALUE), a smaller bound would waste the registers asked."""
    from pyrms import compiler
    src = compiler.read_source("rms_norm.cu")
    assert f"constexpr int PACKED_THREADS = {plan.PACKED_THREADS};" in src
    assert "__launch_bounds__(LANES > 0 ? PACKED_THREADS :" in src

"""The staged backward's plan: where a chunk's column sums are held in registers (HELD) instead of shared memory,
what that leaves in shared memory, and the stages and spread partials of a launch (staged_launch). CPU only;
the bits are the GPU tests' (test_norm_backward_gpu.py)."""
from dataclasses import replace

import pytest

from pyrms import dtypes
from pyrms.ops._norm_backward import plan as bwd_plan


@pytest.mark.parametrize("dtype, hidden, held", [
    ("bfloat16", 64, 1), ("bfloat16", 2048, 1), ("bfloat16", 4096, 2), ("bfloat16", 5120, 3),
    ("bfloat16", 6144, 3), ("bfloat16", 6152, 0), ("bfloat16", 8192, 0), ("float16", 5120, 3),
    ("float32", 2048, 2), ("float32", 3072, 3), ("float32", 4096, 0)])
def test_sums_are_held_where_each_thread_owns_few_vectors(dtype, hidden, held):
    rms = bwd_plan.plan_norm_backward(dtype, hidden)
    assert rms.held == held and rms.threads == min(256, -(-hidden // dtypes.get(dtype).vec_elems // 32) * 32)
    assert rms.held * rms.threads * dtypes.get(dtype).vec_elems >= hidden if held else True
    # two planes (LayerNorm with a weight, RMSNorm with a bias) hold theirs as one plane (RMSNorm's dweight,
    # LayerNorm's dbias alone) does; no plane (RMSNorm without a weight) has nothing to hold
    assert bwd_plan.plan_norm_backward(dtype, hidden, centered=True).held == held
    assert bwd_plan.plan_norm_backward(dtype, hidden, grad_bias=True).held == held
    assert bwd_plan.plan_norm_backward(dtype, hidden, centered=True, weight=False).held == held
    assert bwd_plan.plan_norm_backward(dtype, hidden, weight=False).held == 0


def test_held_sums_leave_shared_memory_to_the_weight_and_the_rows():
    held = bwd_plan.plan_norm_backward("bfloat16", 5120)
    shared = held.staged_shape(held.threads, held.stages, 0)
    assert (held.held, shared.held) == (3, 0)
    assert shared.staged_shared_bytes(2) - held.staged_shared_bytes(2) == 4 * 5120  # the plane of sums
    assert held.staged_shared_bytes(2) == 5120 * (2 + 2 * (2 + 2))  # the weight, two stages of x and dy
    assert held.staged_expression.endswith(", 3>") and shared.staged_expression.endswith("<__nv_bfloat16, false>")
    # every HELD a plan may take is in its compile unit
    assert held.staged_expression in held.group and shared.staged_expression in held.group


@pytest.mark.parametrize("threads, stages, held, why", [
    (512, 2, 3, "at most 256 threads"), (256, 2, 2, "every vector owned"), (128, 2, 3, "every vector owned")])
def test_a_held_that_cannot_be_is_refused(threads, stages, held, why):
    p = bwd_plan.plan_norm_backward("bfloat16", 5120)
    with pytest.raises(ValueError, match=why):
        p.staged_shape(threads, stages, held)
    with pytest.raises(ValueError, match="1 to 2 parameter planes"):  # nothing summed: no sums to hold
        bwd_plan.plan_norm_backward("bfloat16", 5120, weight=False).staged_shape(256, 2, 3)
    assert bwd_plan.plan_norm_backward("bfloat16", 5120, centered=True).staged_shape(256, 2, 3).held == 3
    # the planner's own rule at other launch shapes: held where the threads own few enough vectors, else 0
    assert p.staged_shape(512, 2).held == 0 and p.staged_shape(128, 2).held == 0 and p.staged_shape(224, 2).held == 3


def test_a_grid_of_few_blocks_per_multiprocessor_takes_more_stages():
    p = bwd_plan.plan_norm_backward("bfloat16", 5120)  # held sums: shared memory is the weight and the rows
    assert (p.held, p.stages) == (3, 2)
    # 4096 rows: 256 blocks of 16 on 132 multiprocessors, two each: as many stages as leave room for two
    stages, shared = p.staged_launch(16, 256, 132)
    assert (stages, shared) == (5, 5120 * (2 + 5 * 4))
    assert bwd_plan.staged_blocks_per_sm(shared) == 2 and bwd_plan.staged_blocks_per_sm(shared + 5120 * 4) == 1
    # 16384 rows: 1024 blocks keep the plan's two stages, for four blocks per multiprocessor
    assert p.staged_launch(16, 1024, 132) == (2, 5120 * 10) and bwd_plan.staged_blocks_per_sm(5120 * 10) == 4
    # one row per block uses one buffer whatever the grid; no more stages than a block has rows, nor than 8
    assert p.staged_launch(1, 64, 132) == (2, 5120 * 6)
    assert p.staged_launch(16, 10, 132)[0] == bwd_plan.STAGED_MAX_STAGES and p.staged_launch(4, 10, 132)[0] == 4
    assert replace(p, deepen=False).staged_launch(16, 256, 132) == (2, 5120 * 10)


def test_deeper_stages_only_where_they_cost_no_block():
    p = bwd_plan.plan_norm_backward("bfloat16", 8192)  # sums in shared memory: two blocks per multiprocessor
    plain = p.staged_shared_bytes(2)
    assert bwd_plan.staged_blocks_per_sm(plain) == 2 and bwd_plan.staged_blocks_per_sm(p.staged_shared_bytes(3)) == 1
    assert p.staged_launch(16, 256, 132) == (2, plain)  # a third stage would cost the second block
    assert p.staged_launch(16, 100, 132)[0] == 5  # one block per multiprocessor: up to the shared memory limit
    assert p.staged_shared_bytes(5) <= bwd_plan.STAGED_SHARED_LIMIT < p.staged_shared_bytes(6)


def test_fewer_rows_take_smaller_chunks_by_the_row_count_dtype_and_hidden():
    rows = (1, 512, 2047, 2048, 4095, 4096, 8191, 8192, 16384, 1 << 20)
    # rows that 256 threads cover with at most 3 vectors each (bf16 hidden up to 6144): 512 chunks wanted
    for hidden in (4096, 6144):
        assert [bwd_plan.chunk_rows_for(r, "bfloat16", hidden) for r in rows] == [4, 4, 4, 4, 4, 8, 8, 16, 16, 16]
    # wider rows: 256 chunks
    for dtype, hidden in (("bfloat16", 8192), ("float32", 4096)):
        assert [bwd_plan.chunk_rows_for(r, dtype, hidden) for r in rows] == [4, 4, 4, 8, 8, 16, 16, 16, 16, 16]
    p = bwd_plan.plan_norm_backward("bfloat16", 4096)
    assert p.chunk_rows is None and p.chunk_for(4096) == 8 and p.chunks(4096) == 512
    assert replace(p, chunk_rows=16).chunk_for(4096) == 16  # a plan that names its chunk keeps it
    # neither a forced launch shape (threads, held) nor the variant changes the chunk: the sums' order stays the
    # same across them (a weightless dbias is the weighted one's, bit for bit)
    assert p.staged_shape(128, 2, 0).chunk_for(4096) == 8
    assert {bwd_plan.plan_norm_backward("bfloat16", 4096, **kw).chunk_for(4096) for kw in (
        {"centered": True}, {"centered": True, "weight": False}, {"grad_bias": True}, {"weight": False})} == {8}
    # rows_per_block is 1 or a multiple of GRAD_CHUNK_ROWS: whole chunks at every row count
    assert all(bwd_plan.GRAD_CHUNK_ROWS % p.chunk_for(r) == 0 for r in range(1, 20000, 97))
    assert p.rows_per_block(bwd_plan.BACKWARD_STAGED_FEW_ROWS, staged=True) == 1
    assert p.rows_per_block(bwd_plan.BACKWARD_STAGED_FEW_ROWS + 1, staged=True) == 4


@pytest.mark.parametrize("dtype, hidden, threads", [
    ("bfloat16", 4096, 256), ("bfloat16", 8192, 256), ("bfloat16", 8200, 512), ("bfloat16", 16384, 512),
    ("float32", 4096, 256), ("float32", 8192, 512)])
def test_wide_rows_take_512_threads(dtype, hidden, threads):
    p = bwd_plan.plan_norm_backward(dtype, hidden)
    assert p.threads == threads
    if threads == 512:  # more than STAGED_HELD_THREADS: the sums in shared memory
        assert p.held == 0

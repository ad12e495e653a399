"""Ops run end to end on the CPU through tests/support/fake_driver.py: NVRTC compiles the real kernels for
sm_90, pyrms loads them as libraries, prepares and launches them, and the fake's kernels do nothing
but record each launch (kernel name, grid, block, shared memory, stream, context, and the packed
arguments read as the kernel's parameter kinds). Each test checks those against what the plan says.

The parameter kinds are written here from the kernels' C signatures in cuda_src/, not taken from
pyrms, so a packing that disagrees with the kernel shows; the kernel names are NVRTC's lowered names
of the plan's name expressions."""
import struct

import pytest

import pyrms
from pyrms import compiler, driver
from pyrms.ops import _row_plan as planner
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops._norm_backward import plan as bwd_plan

ROWS_ARGS = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")  # fused_add_rms_norm kernels
RMS_ROWS_ARGS = ROWS_ARGS[:3] + ("ptr",) + ROWS_ARGS[3:]  # rms_norm_kernel: rstd after the weight
BACKWARD_ROWS_ARGS = ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "f32", "i32", "i32", "i64", "i64", "i64", "i32", "i32",
                      "i64", "i32", "i32")  # norm_backward.cuh: backward_rows_kernel
BACKWARD_STAGED_ARGS = BACKWARD_ROWS_ARGS[:15] + ("i32", "i32", "i32")  # norm_backward_staged: fold, dot_fold, stages
BACKWARD_SUM_ARGS = ("ptr", "ptr", "i32", "i32", "i64", "i32", "i32", "i32")  # norm_backward.cuh: sum_partials_kernel
HIDDEN = 5120
EPS = 1e-6


def f32(value: float) -> float:
    """``value`` as the kernel reads it: rounded to float32."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def lowered(p, expression: str) -> str:
    """NVRTC's name of ``expression`` in the plan's group (compiled once, then from the cache)."""
    return compiler.compile_source(p.source, arch="sm_90", name_expressions=tuple(p.group)).lowered_names[expression]


def expect_kinds(fake, p, expressions, kinds) -> dict:
    """Tell the fake how to read the arguments of these kernels; their lowered names by expression."""
    names = {expression: lowered(p, expression) for expression in expressions}
    for name in names.values():
        fake.kernel_params[name] = kinds
    return names


@pytest.fixture
def machine(fake):
    """The fake, with the calling thread on its device and an explicit stream."""
    driver.set_device(0)
    stream = driver.Stream()
    yield fake, stream
    stream.close()


def buffers(*sizes):
    return [driver.DeviceBuffer(size) for size in sizes]


@pytest.mark.parametrize("rows", [1, planner.FEW_ROWS + 3])
@pytest.mark.parametrize("pdl", [True, False])
def test_rms_norm_launches_the_planned_kernel_with_the_planned_arguments(machine, rows, pdl):
    fake, stream = machine
    x_stride, o_stride = HIDDEN + 8, HIDDEN + 16  # rows apart by more than the hidden size
    out, x, w = buffers(2 * rows * o_stride, 2 * rows * x_stride, 2 * HIDDEN)
    p = rms_plan.plan_rms_norm("bfloat16", HIDDEN)
    names = expect_kinds(fake, p, (p.expression, p.latency_expression, p.aligned_latency_expression), RMS_ROWS_ARGS)
    pyrms.rms_norm(out.ptr, x.ptr, w.ptr, EPS, rows, HIDDEN, input_stride=x_stride, out_stride=o_stride,
                   stream=stream, pdl=pdl)
    few = rows <= planner.FEW_ROWS
    aligned = few and p.aligned_layout(x_stride, o_stride) and not (out.ptr | x.ptr | w.ptr) & 15
    expression = (p.aligned_latency_expression if aligned else p.latency_expression) if few else p.expression
    assert len(fake.launches) == 1
    launch = fake.launches[0]
    assert launch.kernel == names[expression]
    assert (launch.grid, launch.block, launch.shared) == ((rows, 1, 1), (p.latency_block if few else p.block, 1, 1), 0)
    assert (launch.stream, launch.context, launch.pdl) == (stream.handle, 0xC000, pdl)
    assert launch.args == (out.ptr, x.ptr, w.ptr, 0, f32(EPS), HIDDEN, x_stride, o_stride)
    # The prepared launch serves the next call: new pointers and epsilon, the same kernel.
    pyrms.rms_norm(x.ptr, x.ptr, w.ptr, 0.5, rows, HIDDEN, input_stride=x_stride, out_stride=x_stride,
                   stream=stream, pdl=pdl)
    assert fake.launches[1].args == (x.ptr, x.ptr, w.ptr, 0, 0.5, HIDDEN, x_stride, x_stride)
    # rstd: each row's inv_rms stored there, the pointer after the weight
    rstd = driver.DeviceBuffer(4 * rows)
    pyrms.rms_norm(out.ptr, x.ptr, w.ptr, EPS, rows, HIDDEN, input_stride=x_stride, out_stride=o_stride,
                   stream=stream, pdl=pdl, rstd=rstd.ptr)
    assert fake.launches[2].args == (out.ptr, x.ptr, w.ptr, rstd.ptr, f32(EPS), HIDDEN, x_stride, o_stride)
    rstd.close()
    for b in (out, x, w):
        b.close()


def test_rms_norm_on_the_default_stream_launches_in_the_devices_context(machine):
    fake, _ = machine
    out, x, w = buffers(2 * HIDDEN, 2 * HIDDEN, 2 * HIDDEN)
    p = rms_plan.plan_rms_norm("bfloat16", HIDDEN)
    names = expect_kinds(fake, p, (p.latency_expression, p.aligned_latency_expression), RMS_ROWS_ARGS)
    pyrms.rms_norm(out.ptr, x.ptr, w.ptr, EPS, 1, HIDDEN)
    launch, = fake.launches
    assert launch.kernel in names.values() and (launch.stream, launch.context) == (0, 0xC000)
    assert launch.args == (out.ptr, x.ptr, w.ptr, 0, f32(EPS), HIDDEN, HIDDEN, HIDDEN)
    for b in (out, x, w):
        b.close()


def test_fused_add_rms_norm_launches_the_planned_kernel_with_the_planned_arguments(machine):
    fake, stream = machine
    rows, x_stride, r_stride = 3, HIDDEN + 24, HIDDEN
    x, residual, w = buffers(2 * rows * x_stride, 2 * rows * r_stride, 2 * HIDDEN)
    p = fused_plan.plan_fused_add_rms_norm("bfloat16", HIDDEN)
    names = expect_kinds(fake, p, (p.latency_expression, p.aligned_latency_expression), ROWS_ARGS)
    pyrms.fused_add_rms_norm(x.ptr, residual.ptr, w.ptr, EPS, rows, HIDDEN, input_stride=x_stride,
                             residual_stride=r_stride, stream=stream)
    aligned = p.aligned_layout(x_stride, r_stride) and not (x.ptr | residual.ptr | w.ptr) & 15
    launch, = fake.launches
    assert launch.kernel == names[p.aligned_latency_expression if aligned else p.latency_expression]
    assert (launch.grid, launch.block, launch.shared, launch.stream) == ((rows, 1, 1), (p.latency_block, 1, 1), 0,
                                                                         stream.handle)
    assert launch.args == (x.ptr, residual.ptr, w.ptr, f32(EPS), HIDDEN, x_stride, r_stride)
    for b in (x, residual, w):
        b.close()


def test_rms_norm_backward_launches_both_kernels_with_the_planned_arguments_and_workspace(machine):
    fake, stream = machine
    rows = 3
    gi, gw, go, x, w = buffers(2 * rows * HIDDEN, 2 * HIDDEN, 2 * rows * HIDDEN, 2 * rows * HIDDEN, 2 * HIDDEN)
    p = bwd_plan.plan_norm_backward("bfloat16", HIDDEN)
    names = expect_kinds(fake, p, (p.expression,), BACKWARD_ROWS_ARGS)
    names.update(expect_kinds(fake, p, (p.staged_expression,), BACKWARD_STAGED_ARGS))
    names.update(expect_kinds(fake, p, (p.sum_expression,), BACKWARD_SUM_ARGS))
    pyrms.rms_norm_backward(gi.ptr, gw.ptr, go.ptr, x.ptr, w.ptr, EPS, rows, HIDDEN, stream=stream)
    # 16-byte aligned operands of whole-vector strides take the staged kernel (norm_backward_staged)
    staged = bool(p.stages) and HIDDEN % 8 == 0 and not (gi.ptr | go.ptr | x.ptr | w.ptr) & 15
    rows_per_block = p.rows_per_block(rows, staged)
    ws_chunk, group = (1, p.chunk_for(rows)) if rows_per_block == 1 else (p.chunk_for(rows), 1)
    ws_rows = p.workspace_rows(rows, rows_per_block)
    allocated = [args for name, args in fake.calls if name == "cuMemAllocFromPoolAsync"]
    freed = [args for name, args in fake.calls if name == "cuMemFreeAsync"]
    assert [(nbytes, s) for nbytes, _, s in allocated] == [(p.workspace_bytes(rows, rows_per_block), stream.handle)]
    ws = freed[0][0]  # the workspace: borrowed on the call's stream, given back on it after both launches
    assert freed == [(ws, stream.handle)]
    first, second = fake.launches
    if staged:
        assert first.kernel == names[p.staged_expression]
        blocks = -(-rows // rows_per_block)
        stages, shared = p.staged_launch(rows_per_block, blocks, 132)  # the fake's 132 multiprocessors
        assert (first.grid, first.block, first.shared) == ((blocks, 1, 1), (p.threads, 1, 1), shared)
        assert first.args == (gi.ptr, ws, go.ptr, x.ptr, w.ptr, 0, f32(EPS), rows, HIDDEN, HIDDEN, HIDDEN, HIDDEN,
                              ws_chunk, rows_per_block, p.ws_stride, p.stats_fold, p.block, stages)
    else:
        assert first.kernel == names[p.expression]
        assert (first.grid, first.block, first.shared) == ((-(-rows // rows_per_block), 1, 1), (p.block, 1, 1),
                                                           p.shared_bytes)
        assert first.args == (gi.ptr, ws, go.ptr, x.ptr, w.ptr, 0, f32(EPS), rows, HIDDEN, HIDDEN, HIDDEN, HIDDEN,
                              ws_chunk, rows_per_block, p.ws_stride, 1 if p.shared_bytes else 0, p.stats_fold)
    assert second.kernel == names[p.sum_expression]
    assert (second.grid, second.block) == ((-(-HIDDEN // 32), 1, 1), (32, 32, 1))
    weight_phase = w.ptr // 2 % 8
    assert second.args == (gw.ptr, ws, HIDDEN, p.chunks(rows), p.ws_stride, weight_phase, group, ws_rows)
    assert {launch.stream for launch in fake.launches} == {stream.handle}
    for b in (gi, gw, go, x, w):
        b.close()


def test_a_wrong_argument_is_refused_before_the_fake_runs_anything(machine):
    fake, stream = machine
    out, x, w = buffers(2 * HIDDEN, 2 * HIDDEN, 2 * HIDDEN)
    with pytest.raises(ValueError, match="epsilon"):
        pyrms.rms_norm(out.ptr, x.ptr, w.ptr, -1.0, 1, HIDDEN, stream=stream)
    assert fake.launches == []
    for b in (out, x, w):
        b.close()

"""The backward on GPUs with less shared memory than Hopper's (the fake driver set to an A100's and a Turing's):
each kernel's shared memory is asked for only where the GPU allows it, and a plan that needs more runs the
kernels that need less (the same arithmetic). No GPU."""
import pytest

import pyrms
from pyrms.tensor import Tensor
from pyrms.ops._norm_backward import plan as bwd_plan

A100 = (166912, 167936)  # (shared memory a block may opt into, a multiprocessor's)
TURING = (65536, 65536)


def _backward(recorded, gpu, hidden, rows=300):
    calls, fake = recorded
    fake.shared_optin, fake.shared_per_sm = gpu
    dx, dy, x = (Tensor.empty((rows, hidden), "bfloat16") for _ in range(3))
    w, dw = Tensor.empty((hidden,), "bfloat16"), Tensor.empty((hidden,), "bfloat16")
    if (dx.ptr | dy.ptr | x.ptr | w.ptr) & 15:
        pytest.skip("the allocator gave an unaligned buffer: no staged kernel either way")
    pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-6)
    asked = [args[-1] for name, args in fake.calls if name == "cuFuncSetAttribute"]
    return calls[0], asked, bwd_plan.plan_norm_backward("bfloat16", hidden)


def test_a_staged_plan_that_needs_more_than_the_gpu_allows_takes_the_rows_kernel(recorded):
    (expression, _, block, shared, args), asked, p = _backward(recorded, A100, 16384)
    assert p.staged_shared_bytes(p.stages) > A100[0] - 1024  # Hopper's plan: 229,376 bytes a block
    assert expression == p.expression and block == p.block
    assert shared == p.shared_bytes and args[-2] == 1  # its sums still fit in shared memory
    assert asked and max(asked) <= A100[0] - 1024


def test_a_staged_plan_that_fits_deepens_within_the_gpus_shared_memory(recorded):
    (expression, grid, _, shared, args), asked, p = _backward(recorded, A100, 8192, rows=520)
    chunk = p.chunk_for(520)
    assert expression == p.staged_expression and (chunk, grid) == (4, 130)  # chunks of 4 rows, a block per SM
    stages = args[-1]
    # as many stages as an A100's 163 KiB a block allow: fewer than Hopper's 227 KiB
    assert (stages, shared) == p.staged_launch(chunk, 130, 132, A100[1], A100[0] - 1024)
    assert p.stages < stages < p.staged_launch(chunk, 130, 132)[0] and shared == p.staged_shared_bytes(stages)
    assert shared <= A100[0] - 1024 < p.staged_shared_bytes(stages + 1) and max(asked) <= A100[0] - 1024


def test_sums_that_do_not_fit_the_gpus_shared_memory_go_to_the_workspace(recorded):
    (expression, _, _, shared, args), asked, p = _backward(recorded, TURING, 16384)
    assert p.shared_bytes > TURING[0] - 1024  # Hopper's plan keeps the sums in shared memory
    assert expression == p.expression and shared == 0 and args[-2] == 0 and asked == []

"""RMSNorm's backward's pieces of the shared checks (tests.support.op_tests): the call that runs a case of the case
matrix (through tests.support.testing.check_norm_backward, the checker both norms' backward share) and the raw call
of the lab tools."""
from __future__ import annotations

import functools
from typing import Iterator

import pyrms
from pyrms import dtypes
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
from tests.support.case_matrix import Case, case, gpu_backward, sanitize_backward
from tests.support.op_tests import OpTests, RawCall
from tests.support.testing import backward_checker_call


def _raw_launch(case, at, **common) -> None:
    s = case.stride
    pyrms.rms_norm_backward(at["grad_input"], at["grad_weight"], at["grad_output"], at["input"], at["weight"],
                            case.option("epsilon"), case.rows, case.hidden, grad_output_stride=s("grad_output"),
                            input_stride=s("input"), grad_input_stride=s("grad_input"), **common)


def _raw_twin(case, rows, positions) -> dict:
    p = bwd_plan.plan_norm_backward(dtypes.get(case.dtype), case.hidden)
    dx, dw = bwd_twin.norm_backward_twin(rows["grad_output"], rows["input"], rows["weight"][0], case.option("epsilon"),
                                         block=p.block, fold=p.stats_fold, x_phases=positions["input"],
                                         weight_phase=positions["weight"], chunk_rows=p.chunk_rows,
                                         grad_dtype=p.grad_dtype)
    return {"grad_input": dx, "grad_weight": dw[None]}


def _concurrency() -> Iterator[Case]:
    """bf16 rows of 1027, 1 to 33 rows: one to three 16-row chunks of the dweight sum."""
    op, h = "rms_norm_backward", 1027
    return (case(op, "bfloat16", 1 + k % 33, h,
                 offsets={"grad_output": 3 * k % 8, "input": k % 8, "weight": 5 * k % 8, "grad_input": 7 * k % 8,
                          "grad_weight": (k + 4) % 8},
                 strides={"grad_output": h + 3 + k % 2, "input": h + 3 + k % 2, "grad_input": h + 1},
                 epsilon=1e-6 * (1 + k % 3)) for k in range(264))


TESTS = {"rms_norm_backward": OpTests(
    functools.partial(backward_checker_call, layer_norm=False),
    functools.partial(sanitize_backward, "rms_norm_backward", layer_norm=False),
    gpu=functools.partial(gpu_backward, "rms_norm_backward", layer_norm=False), concurrency=_concurrency,
    raw=RawCall(("grad_input", "grad_weight"), _raw_launch, _raw_twin))}

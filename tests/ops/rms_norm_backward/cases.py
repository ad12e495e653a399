"""RMSNorm's backward's pieces of the shared checks (tests.support.op_tests): the call that runs a case of the case
matrix (through tests.support.testing.check_norm_backward, the checker both norms' backward share) and the raw call
of the lab tools."""
from __future__ import annotations

import functools

import pyrms
from pyrms import dtypes
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin
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


TESTS = {"rms_norm_backward": OpTests(functools.partial(backward_checker_call, layer_norm=False),
                                      raw=RawCall(("grad_input", "grad_weight"), _raw_launch, _raw_twin))}

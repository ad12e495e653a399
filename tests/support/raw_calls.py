"""Each op's call on a case's operands, its outputs and their twin, for the lab tools that launch the same
operands many times and check them afterwards (tools/soak.py, tools/concurrency_check.py): they take the op
of a tests.support.case_matrix case and never name one. The ops here are the ones those tools' cases run
(case_matrix.SOAK, case_matrix.CONCURRENCY_HIDDEN); ValueError for another."""
from __future__ import annotations

from typing import Mapping

import numpy as np

import pyrms
from pyrms import dtypes
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin

# The operands each op writes (the others it reads), in its call's order.
OUTPUTS = {"rms_norm": ("out",), "layer_norm": ("out",), "rms_norm_backward": ("grad_input", "grad_weight")}


def outputs(op: str) -> tuple[str, ...]:
    """The operands ``op`` writes; ValueError for an op without a call here."""
    if op not in OUTPUTS:
        raise ValueError(f"no raw call of {op!r} here; the ops: {', '.join(OUTPUTS)}")
    return OUTPUTS[op]


def launch(case, at: Mapping[str, object], stream=None) -> None:
    """One call of ``case``'s op in vLLM's order (out first) on its operands by name ``at``: device addresses
    (the raw-pointer fast path; the case's dtype says theirs) or pyrms Tensors (the general path), the case's
    rows, hidden size, epsilon, row strides and options, on ``stream`` (a raw handle, a pyrms.Stream or None)."""
    op, eps, rows, hidden, s = case.op, case.option("epsilon"), case.rows, case.hidden, case.stride
    raw = isinstance(at[outputs(op)[0]], int)
    common = dict(dtype=case.dtype, stream=stream) if raw else dict(stream=stream)
    if op == "rms_norm":
        pyrms.rms_norm(at["out"], at["input"], at["weight"], eps, rows, hidden, input_stride=s("input"),
                       out_stride=s("out"), gemma=case.option("gemma"), round_once=case.option("round_once"), **common)
    elif op == "layer_norm":
        pyrms.layer_norm(at["out"], at["input"], at["weight"], at["bias"], eps, rows, hidden, **common)
    else:
        pyrms.rms_norm_backward(at["grad_input"], at["grad_weight"], at["grad_output"], at["input"], at["weight"], eps,
                                rows, hidden, grad_output_stride=s("grad_output"), input_stride=s("input"),
                                grad_input_stride=s("grad_input"), **common)


def twin(case, rows: Mapping[str, np.ndarray], phases: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The case's outputs by name, as the kernel computes them bit for bit, from its inputs' values
    (``rows``: [rows, hidden] each, [1, hidden] for a vector) and each input's position inside its 16-byte
    vectors (``phases``: an int, or one per row; the weight's an int)."""
    op, eps, dt, hidden = case.op, case.option("epsilon"), dtypes.get(case.dtype), case.hidden
    outputs(op)
    if op == "rms_norm":
        gemma, round_once = case.option("gemma"), case.option("round_once")
        block = rms_plan.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once).block
        return {"out": rms_twin.rms_norm_twin(rows["input"], rows["weight"][0], eps, block=block,
                                              row_phases=phases["input"], gemma=gemma, round_once=round_once)}
    if op == "layer_norm":
        block = ln_plan.plan_layer_norm(dt, hidden).block
        return {"out": ln_twin.layer_norm_twin(rows["input"], rows["weight"][0], rows["bias"][0], eps, block=block,
                                               row_phases=phases["input"])}
    p = bwd_plan.plan_norm_backward(dt, hidden)
    dx, dw = bwd_twin.norm_backward_twin(rows["grad_output"], rows["input"], rows["weight"][0], eps, block=p.block,
                                         fold=p.stats_fold, x_phases=phases["input"], weight_phase=phases["weight"],
                                         chunk_rows=p.chunk_rows, grad_dtype=p.grad_dtype)
    return {"grad_input": dx, "grad_weight": dw[None]}

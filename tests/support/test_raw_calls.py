"""tests.support.raw_calls without a GPU: each op's call gets the case's operands in its order with its
options (pyrms's functions replaced by recorders), and its twin answers in the outputs' shapes, close to
the float64 reference."""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from pyrms.ops.rms_norm.twin import rms_norm_ref
from tests.support import case_matrix, raw_calls


@pytest.fixture
def calls(monkeypatch):
    """pyrms's functions that raw_calls launches, each replaced by a recorder of (name, args, kwargs)."""
    recorded = []
    for name in raw_calls.OPS:
        monkeypatch.setattr(pyrms, name, lambda *args, _name=name, **kwargs: recorded.append((_name, args, kwargs)))
    return recorded


def _pointers(case):
    return {name: 0x1000 * (k + 1) for k, name in enumerate(case_matrix.pointers(case.op))}


@pytest.mark.parametrize("key", sorted(case_matrix.SOAK))
def test_the_soak_cases_launch_out_first_with_their_dtype_on_raw_pointers(calls, key):
    case = case_matrix.SOAK[key]
    at = _pointers(case)
    raw_calls.launch(case, at, stream=7)
    ((name, args, kwargs),) = calls
    assert name == case.op
    written = raw_calls.outputs(case.op)
    assert args[:len(written)] == tuple(at[n] for n in written)  # vLLM's order: outputs first
    assert args[-3:] == (case.option("epsilon"), case.rows, case.hidden)
    assert kwargs["dtype"] == case.dtype and kwargs["stream"] == 7
    calls.clear()
    raw_calls.launch(case, {n: object() for n in at}, stream=None)  # arrays: no dtype, theirs is known
    assert "dtype" not in calls[0][2]


def test_a_concurrency_case_passes_its_strides_and_options(calls):
    for op in case_matrix.concurrency_ops():
        case = case_matrix.concurrency(op)[1]
        raw_calls.launch(case, _pointers(case), stream=None)
        kwargs = calls[-1][2]
        for name in case_matrix.operands(op)[0]:
            if case.stride(name) is not None:
                assert kwargs[f"{name}_stride"] == case.stride(name)
        if op == "rms_norm":
            assert (kwargs["gemma"], kwargs["round_once"]) == (case.option("gemma"), case.option("round_once"))


def test_an_op_without_a_call_is_refused():
    with pytest.raises(ValueError, match="no raw call of 'static_quant'"):
        raw_calls.outputs("static_quant")


def test_the_twins_answer_each_output_close_to_the_reference():
    rng = np.random.default_rng(0)
    for case in case_matrix.SOAK.values():
        dt = dtypes.get(case.dtype)
        vectors = case_matrix.operands(case.op)[1]
        rows = {name: rng.uniform(-1, 1, (1 if name in vectors else case.rows, case.hidden)).astype(dt.numpy)
                for name in case_matrix.pointers(case.op) if name not in raw_calls.outputs(case.op)}
        want = raw_calls.twin(case, rows, {"input": 0, "weight": 0})
        assert sorted(want) == sorted(raw_calls.outputs(case.op))
        for name, values in want.items():
            assert values.shape == ((1 if name in vectors else case.rows), case.hidden)
            assert np.isfinite(values.astype(np.float64)).all()
        if case.op == "rms_norm":
            ref = rms_norm_ref(rows["input"], rows["weight"][0], case.option("epsilon"))
            assert np.allclose(want["out"].astype(np.float64), ref, rtol=2e-2, atol=1e-2)

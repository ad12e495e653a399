"""tools/soak.py's and tools/concurrency_check.py's operands on the fake driver (no GPU, nothing launched):
each case's operands are allocated as its op's call takes them (tests.support.raw_calls), and each expected
slot is the twin's rows inside poison, so the GPU runs compare what the op writes."""
import numpy as np

from pyrms import driver, dtypes
from tests.support import case_matrix, raw_calls
from tests.support.testing import bits
from tools import concurrency_check, soak


def test_soak_allocates_each_cases_operands_with_poisoned_outputs(fake):
    driver.set_device(0)
    rng = np.random.default_rng(5)
    for case in case_matrix.SOAK.values():
        ops = soak.Operands(case, rng)
        try:
            rows, vectors = case_matrix.operands(case.op)
            assert set(ops.tensors) == set(rows + vectors) and tuple(ops.outputs) == raw_calls.outputs(case.op)
            for name, tensor in ops.tensors.items():
                assert tensor.shape == ((case.hidden,) if name in vectors else (case.rows, case.hidden)), name
            assert not ops.correct()  # nothing launched: the outputs are still poison
            for name in ops.outputs:
                assert (ops.tensors[name].to_numpy().view(np.uint8) == 0xFF).all()
        finally:
            ops.close()


def test_concurrency_expects_the_twins_rows_inside_poison(fake):
    driver.set_device(0)
    rng = np.random.default_rng(1)
    for op in case_matrix.concurrency_ops():
        work = concurrency_check.Work(op, 1, 3, rng)
        try:
            assert set(work.slots) == set(raw_calls.outputs(op))
            for i in range(3):
                case = work.case(i)
                for name, start, expected in work.expected_slots(i):
                    assert expected.size == work.slots[name] and start == i * work.slots[name]
                    poison = bits(np.frombuffer(b"\xff" * dtypes.get(case.dtype).itemsize, expected.dtype))[0]
                    written = bits(expected) != poison
                    rows = 1 if name in case_matrix.operands(op)[1] else case.rows
                    assert written.sum() == rows * case.hidden, (op, name)  # the rows, no element outside
        finally:
            work.close()

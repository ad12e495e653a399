"""tests.support.op_tests: every op of the registry has its pieces in its family's tests/ops/<family>/cases.py, and
each cases.py holds pieces of its own family's ops only."""
import importlib

import pytest

from pyrms.ops import registry
from tests.support import op_tests


@pytest.mark.parametrize("op", registry.NAMES)
def test_every_op_has_its_pieces_in_its_folder(op):
    pieces = op_tests.of(op)
    assert isinstance(pieces, op_tests.OpTests) and callable(pieces.checker_call) and callable(pieces.sanitize)
    assert pieces.raw is None or isinstance(pieces.raw, op_tests.RawCall)


def test_each_folder_holds_its_own_ops_only():
    for family in {op_tests.family(op) for op in registry.NAMES}:
        ops = set(importlib.import_module(f"tests.ops.{family}.cases").TESTS)
        assert {op_tests.family(op) for op in ops} == {family}, (family, ops)


def test_an_unknown_op_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown op 'sideways'"):
        op_tests.of("sideways")

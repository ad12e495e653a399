"""What the ops' declarations (each family's spec.py) share: the weight, output and case-option vocabularies."""
from __future__ import annotations

from .. import dtypes, plan

# Options every case of a row op or backward may set (the case matrix's vocabulary).
COMMON_CASE_OPTIONS = ("epsilon", "pdl", "weight")


def mixed(dt: dtypes.DType) -> bool:
    """Whether fp32 weights and outputs may sit beside rows of ``dt`` (2-byte rows only)."""
    return dt is not dtypes.FLOAT32


def weight_options(dt: dtypes.DType) -> list:
    """The weight kinds a unit is compiled for: the rows' dtype (None), none, and float32 beside 2-byte rows."""
    return [None, "none"] + (["float32"] if mixed(dt) else [])


def out_options(dt: dtypes.DType) -> list:
    """The output kinds a unit is compiled for: the rows' dtype (None), and float32 beside 2-byte rows."""
    return [None] + (["float32"] if mixed(dt) else [])


def row_labels(dt: dtypes.DType, flags: dict, weight_dtype, out_dtype) -> tuple[str, str]:
    """(flags and weight, output) parts of a row unit's label: only what is not the default."""
    label = "".join(f" {name}" for name, value in flags.items() if value)
    if weight_dtype is not None:
        label += f" weight={weight_dtype}"
    return label, " out=float32" if plan.out_kind(dt, out_dtype) != "same" else ""


def row_operands(*, in_place=None, weight=True, **_):
    """(rows, vectors) of a normalizing row op with out beside input (or in place over it)."""
    return ("input",) if in_place else ("input", "out"), ("weight",) * weight

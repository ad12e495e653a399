"""What each benchmarked op reads and writes, and so the bytes one call must move (pure).

Bytes count each input read once and each output written once: the floor any kernel pays. The
weight is counted once per call (every row reads it, but after the first read it comes from L2).
Scratch traffic an implementation adds (backward's fp32 partial sums of dγ) is its own overhead and
is not counted.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpSpec:
    name: str
    inputs: tuple[str, ...]      # [tokens, hidden] arrays only read (random data)
    inplace: tuple[str, ...]     # [tokens, hidden] arrays read and overwritten (random data)
    outputs: tuple[str, ...]     # [tokens, hidden] arrays only written (poisoned before validation)
    vector_outputs: tuple[str, ...]  # [hidden] outputs (dγ)
    row_terms: int               # [tokens, hidden] arrays moved per call (reads + writes)
    vector_terms: int            # [hidden] vectors moved per call (γ read, dγ written)
    impls: tuple[str, ...]       # implementations that exist for this op
    results: tuple[str, ...]     # outputs validated against the reference
    formula: str                 # the byte count in words, for the report

    @property
    def arrays(self) -> tuple[str, ...]:
        """Every per-set [tokens, hidden] array."""
        return self.inputs + self.inplace + self.outputs

    def elements_moved(self, tokens: int, hidden: int) -> int:
        return self.row_terms * tokens * hidden + self.vector_terms * hidden

    def bytes_moved(self, tokens: int, hidden: int, itemsize: int) -> int:
        return self.elements_moved(tokens, hidden) * itemsize


RMS_NORM = OpSpec(
    "rms_norm", inputs=("x",), inplace=(), outputs=("y",), vector_outputs=(), row_terms=2, vector_terms=1,
    impls=("pyrms", "pyrms_nopdl", "seed", "torch", "compile", "triton"), results=("y",),
    formula="read x + read γ + write y = (2·T·H + H) elements")
FUSED_ADD = OpSpec(
    "fused_add_rms_norm", inputs=(), inplace=("x", "r"), outputs=(), vector_outputs=(), row_terms=4,
    vector_terms=1, impls=("pyrms", "torch", "compile"), results=("y", "r"),
    formula="read x, r, γ + write r, x = (4·T·H + H) elements")
BACKWARD = OpSpec(
    "rms_norm_backward", inputs=("dy", "x"), inplace=(), outputs=("dx",), vector_outputs=("dw",), row_terms=3,
    vector_terms=2, impls=("pyrms", "torch"), results=("dx", "dw"),
    formula="read dy, x, γ + write dx, dγ = (3·T·H + 2·H) elements")

OPS = {op.name: op for op in (RMS_NORM, FUSED_ADD, BACKWARD)}


def get(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r}; allowed: {', '.join(OPS)}") from None

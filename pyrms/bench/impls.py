"""What every benchmark implementation is: a factory that, given a Problem, returns an Impl ready to
launch on any rotation set, or raises Unavailable saying why it cannot run. Each op declares its
factories (pyrms's, the seed kernel's, PyTorch's, Triton's) in its family's bench module
(``Bench.impls``; registry.make finds the one of an (op, implementation)).

An Impl queues one call on rotation set i with ``launch(i)`` (on the benchmark's stream), and after
``launch(i)`` tells where its outputs are with ``results(i)`` (device pointers of contiguous arrays,
keyed like ops.Bench.results). What PyTorch eager, torch.compile and Triton share is in torch_impls,
which builds on this module (and this module does not import it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyrms


class Unavailable(Exception):
    """The implementation cannot run here or at this shape; the message says why (one line)."""


@dataclass
class Context:
    """What factories need besides the Problem."""

    stream: int                 # raw stream handle every implementation launches on
    epsilon: float
    torch: object = None        # the torch module, or None
    torch_reason: str = ""      # why torch is None
    triton: object = None       # the triton module, or None
    triton_reason: str = ""
    compile_here: bool = True   # whether torch.compile runs at this shape (--quick limits it)
    notes: list = field(default_factory=list)


class Impl:
    name = "impl"

    def __init__(self):
        self.notes: list[str] = []

    def launch(self, i: int) -> None:
        raise NotImplementedError

    def results(self, i: int) -> dict[str, int]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def pyrms_function(name: str):
    """``pyrms.<name>``, or Unavailable where this pyrms lacks it."""
    fn = getattr(pyrms, name, None)
    if fn is None:
        raise Unavailable(f"pyrms {pyrms.__version__} has no {name}")
    return fn

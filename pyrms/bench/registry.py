"""Every implementation the benchmark can time, by (op, implementation name): each op's declaration
(ops.Bench.impls, in its family's bench module) names its factories, pyrms's and the others' alike."""
from __future__ import annotations

from . import impls, ops


def factories() -> dict:
    """(op, implementation) -> factory(ctx, problem) -> Impl."""
    return {(op, name): factory for op, bench in ops.benches().items() for name, factory in bench.impls.items()}


def make(op: str, impl: str, ctx: impls.Context, problem) -> impls.Impl:
    """The Impl of `impl` for `op` on `problem`; impls.Unavailable when there is none, or it cannot run."""
    bench = ops.benches().get(op)
    factory = bench.impls.get(impl) if bench is not None else None
    if factory is None:
        raise impls.Unavailable(f"no {impl} implementation of {op}")
    return factory(ctx, problem)

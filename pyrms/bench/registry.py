"""Every implementation the benchmark can time, by (op, implementation name): pyrms's and the seed
kernel's (impls) and PyTorch's and Triton's (torch_impls). Its own module so that neither of those
imports the other's side: torch_impls builds on impls, and only this module sees both."""
from __future__ import annotations

from . import impls, torch_impls


def factories() -> dict:
    """(op, implementation) -> factory(ctx, problem) -> Impl."""
    table = {
        ("rms_norm", "pyrms"): impls.PyrmsForward,
        ("rms_norm", "pyrms_nopdl"): impls.PyrmsForwardNoPdl,
        ("rms_norm", "seed"): impls.SeedForward,
        ("fused_add_rms_norm", "pyrms"): impls.PyrmsFusedAdd,
        ("rms_norm_backward", "pyrms"): impls.PyrmsBackward,
    }
    table.update(torch_impls.FACTORIES)
    return table


def make(op: str, impl: str, ctx: impls.Context, problem) -> impls.Impl:
    """The Impl of `impl` for `op` on `problem`; impls.Unavailable when there is none, or it cannot run."""
    factory = factories().get((op, impl))
    if factory is None:
        raise impls.Unavailable(f"no {impl} implementation of {op}")
    return factory(ctx, problem)

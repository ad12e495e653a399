"""The seed kernel's benchmark declaration: its example call for tools/profile_launch.py (it runs in the
sweep as the headline op's "seed" implementation, declared in that op's bench module). Launches without PDL."""
from __future__ import annotations

from ...bench.ops import Bench
from .op import seed_rms_norm


def example(e):
    return lambda: seed_rms_norm(e.c.ptr, e.a.ptr, e.w.ptr, 1e-6, e.rows, e.hidden, dtype=e.dt)


BENCHES = (Bench("seed_rms_norm", example=example),)

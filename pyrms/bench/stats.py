"""Medians, spreads, rotation counts, batch sizes and row sampling (pure: no GPU)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALIGN = 256  # every rotation set starts on a 256-byte boundary, like a fresh cuMemAlloc


def pad(nbytes: int, align: int = ALIGN) -> int:
    return -(-nbytes // align) * align


@dataclass(frozen=True)
class Summary:
    """Per-launch times (µs) of one implementation at one shape, over rounds of samples."""

    median: float        # of every sample
    p10: float
    p90: float
    round_medians: tuple[float, ...]
    samples: int

    @property
    def spread(self) -> float:
        """Run-to-run spread: (largest - smallest round median) / median. The rounds are separate
        passes over all implementations, so this is what "the same version timed twice" differs by."""
        if len(self.round_medians) < 2 or self.median <= 0:
            return 0.0
        return (max(self.round_medians) - min(self.round_medians)) / self.median

    @property
    def noise(self) -> float:
        """Within-run scatter of single samples: (p90 - p10) / median."""
        return (self.p90 - self.p10) / self.median if self.median > 0 else 0.0


def summarize(rounds) -> Summary | None:
    """Summary of a list of rounds, each a list of per-launch times; None if there is no sample."""
    rounds = [list(r) for r in rounds if len(r)]
    if not rounds:
        return None
    every = np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds])
    p10, median, p90 = np.percentile(every, [10, 50, 90])
    return Summary(float(median), float(p10), float(p90), tuple(float(np.median(r)) for r in rounds), int(every.size))


def gbps(nbytes: int, microseconds: float) -> float:
    """Bytes over time, in GB/s (10^9 bytes per second)."""
    return nbytes / microseconds / 1e3 if microseconds > 0 else 0.0


def rotation_sets(set_bytes: int, l2_bytes: int, cap_bytes: int, factor: float = 2.0, min_sets: int = 2) -> int:
    """How many input/output sets to rotate through so that consecutive calls find nothing in L2:
    enough that all sets together exceed ``factor`` x L2 (at least ``min_sets``), but no more than
    fit in ``cap_bytes`` (at least one)."""
    if set_bytes <= 0:
        raise ValueError(f"set_bytes must be > 0, got {set_bytes}")
    wanted = max(min_sets, math.ceil(factor * l2_bytes / set_bytes))
    fitting = max(1, cap_bytes // set_bytes)
    return int(min(wanted, fitting))


def batch_size(nbytes: int, target_us: float = 1000.0, low: int = 3, high: int = 100,
               assumed_gbps: float = 3000.0, launch_us: float = 3.0) -> int:
    """Launches per timed sample: enough that a sample lasts about ``target_us`` of device time."""
    estimate = nbytes / assumed_gbps / 1e3 + launch_us
    return int(min(high, max(low, math.ceil(target_us / estimate))))


def sample_rows(tokens: int, hidden: int, full_limit: int = 1 << 24, edge: int = 32, middle: int = 192) -> list[int]:
    """Rows to validate: all of them up to ``full_limit`` elements, else the first and last
    ``edge`` rows and ``middle`` rows spread evenly between (sorted, distinct)."""
    if tokens * hidden <= full_limit or tokens <= 2 * edge + middle:
        return list(range(tokens))
    rows = set(range(edge)) | set(range(tokens - edge, tokens))
    rows |= {int(r) for r in np.linspace(edge, tokens - edge - 1, middle)}
    return sorted(rows)


def contiguous_runs(rows) -> list[tuple[int, int]]:
    """Sorted distinct rows as (first, count) runs, so each run downloads in one copy."""
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and runs[-1][0] + runs[-1][1] == r:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((r, 1))
    return runs

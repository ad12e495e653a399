"""One Record per (op, dtype, shape, implementation): its status, its samples and what follows from them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats

OK, SKIPPED, FAILED = "ok", "skipped", "failed"


class Timed:
    """What a timed result derives from its per-round samples (`rounds`, µs per launch) and `status`."""

    @property
    def summary(self) -> stats.Summary | None:
        return stats.summarize(self.rounds) if self.status == OK else None

    @property
    def median_us(self) -> float | None:
        s = self.summary
        return s.median if s else None


@dataclass
class Record(Timed):
    op: str
    dtype: str
    tokens: int
    hidden: int
    impl: str
    bytes: int                     # bytes one call must move (ops.Bench.bytes_moved)
    status: str = OK               # ok | skipped (with reason) | failed (with reason; never timed)
    reason: str = ""
    error: dict = field(default_factory=dict)   # validation: relative error per output
    sets: int = 0                  # rotation sets
    batch: int = 0                 # launches per sample
    rounds: list = field(default_factory=list)  # per round: per-launch device times, µs
    host_bound: int = 0            # samples redone because the host had not queued the batch in time
    notes: list = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.tokens, self.hidden)

    @property
    def gbps(self) -> float | None:
        us = self.median_us
        return stats.gbps(self.bytes, us) if us else None

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """The Record that ``to_dict`` wrote (a run's JSON "results" entry): what its figures derive from."""
        return cls(d["op"], d["dtype"], d["tokens"], d["hidden"], d["impl"], d["bytes"], d["status"], d["reason"],
                   {k: float(v) for k, v in d["validation_rel_error"].items()}, d["rotation_sets"],
                   d["launches_per_sample"], d["samples_us_per_round"], d["host_bound_samples_redone"], d["notes"])

    def to_dict(self, ceiling_gbps: float | None = None) -> dict:
        s = self.summary
        out = {
            "op": self.op, "dtype": self.dtype, "tokens": self.tokens, "hidden": self.hidden, "impl": self.impl,
            "bytes": self.bytes, "status": self.status, "reason": self.reason,
            "validation_rel_error": {k: (v if math.isfinite(v) else str(v)) for k, v in self.error.items()},
            "rotation_sets": self.sets, "launches_per_sample": self.batch, "host_bound_samples_redone": self.host_bound,
            "samples_us_per_round": self.rounds, "notes": self.notes,
        }
        if s is not None:
            out.update(median_us=s.median, p10_us=s.p10, p90_us=s.p90, round_medians_us=list(s.round_medians),
                       spread=s.spread, noise=s.noise, gbps=self.gbps)
            if ceiling_gbps:
                out["ceiling_fraction"] = self.gbps / ceiling_gbps
        return out


def find(records, op: str, dtype: str, tokens: int, hidden: int, impl: str, ok_only: bool = True) -> Record | None:
    for r in records:
        if (r.op, r.dtype, r.tokens, r.hidden, r.impl) == (op, dtype, tokens, hidden, impl):
            if ok_only and (r.status != OK or r.median_us is None):
                return None
            return r
    return None


def best_of(records, op: str, dtype: str, tokens: int, hidden: int, impls) -> Record | None:
    """The fastest successfully timed record among ``impls`` at one shape."""
    found = [r for i in impls if (r := find(records, op, dtype, tokens, hidden, i)) is not None]
    return min(found, key=lambda r: r.median_us) if found else None


@dataclass
class AfterGemm(Record):
    """One implementation after a GEMM, in a CUDA graph (pyrms.bench.after_gemm): ``rounds`` hold its µs per
    norm, each sample (a replay of the graph with the norms - a replay of the one without) / ``pairs``;
    ``gemm_rounds`` the µs per GEMM of the graph without the norms, sample for sample; ``batch`` the replays of
    each graph per sample; ``k`` the GEMM's inner size."""

    gemm_rounds: list = field(default_factory=list)
    pairs: int = 0
    k: int = 0

    @property
    def gemm_summary(self) -> stats.Summary | None:
        return stats.summarize(self.gemm_rounds) if self.status == OK else None

    def to_dict(self, ceiling_gbps: float | None = None) -> dict:
        out = super().to_dict(ceiling_gbps)
        out.update(method="after a GEMM, in a CUDA graph", pairs=self.pairs, gemm_k=self.k,
                   replays_per_sample=self.batch, gemm_us_per_round=self.gemm_rounds)
        g = self.gemm_summary
        if g is not None:
            out.update(gemm_median_us=g.median, gemm_spread=g.spread)
        return out

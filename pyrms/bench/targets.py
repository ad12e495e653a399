"""The bandwidth and latency targets of the headline op (ops.headline()), the host targets, the decode
targets and the other ops' targets, checked against one run's numbers: PASS, FAIL or N/A (not measured), each
with the numbers that decided it (pure). The data: the cross-op targets in targets.json beside this file, each
op's own with its benchmark declaration (ops.Targets, in its folder's bench.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import floor as floor_mod
from . import ops as ops_mod
from .config import DECODE_MAX_TOKENS, DTYPE_SHORT, FLOOR_HIDDEN, IMPL_LABELS, LIKE_FOR_LIKE, NOPDL
from .results import best_of, find

TARGETS_FILE = Path(__file__).with_name("targets.json")


def _shape_key(text: str) -> tuple[int, int]:
    tokens, hidden = text.split("x")
    return int(tokens), int(hidden)


def load(path: Path = TARGETS_FILE) -> dict:
    """The targets of `path` (targets.json's layout) as this module's constants, by name; ValueError
    naming the file and the key for a missing or malformed one."""
    data = json.loads(Path(path).read_text())
    try:
        fwd, extra, host, decode = data["forward"], data["extra_ops"], data["host"], data["decode"]
        return {
            "FORWARD_CEILING": {_shape_key(k): float(v) for k, v in fwd["ceiling"].items()},
            "VS_OTHERS_MIN_TOKENS": int(fwd["vs_others_min_tokens"]),
            "SLOW_OTHER_FRACTION": float(fwd["slow_other_fraction"]),
            "SLOW_OTHER_SPEEDUP": float(fwd["slow_other_speedup"]),
            "LATENCY_VS_SEED": float(fwd["latency_vs_seed"]),
            "EXTRA_OP_SHAPE": _shape_key(extra["shape"]),
            "HOST_TORCH_VS_EAGER": float(host["torch_vs_eager"]),
            "FLOOR_LIMITS": {k: (bool(v["pdl"]), float(v["at_most"])) for k, v in decode["floor_limits"].items()},
            "DECODE_TOKENS": tuple(int(t) for t in decode["tokens"]),
            "DECODE_VS_OTHERS": float(decode["vs_others"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: missing or malformed target ({type(exc).__name__}: {exc})") from None


# The targets as module constants (read once, at import).
_T = load()
FORWARD_CEILING = _T["FORWARD_CEILING"]
VS_OTHERS_MIN_TOKENS = _T["VS_OTHERS_MIN_TOKENS"]
SLOW_OTHER_FRACTION = _T["SLOW_OTHER_FRACTION"]
SLOW_OTHER_SPEEDUP = _T["SLOW_OTHER_SPEEDUP"]
LATENCY_VS_SEED = _T["LATENCY_VS_SEED"]
EXTRA_OP_SHAPE = _T["EXTRA_OP_SHAPE"]
HOST_TORCH_VS_EAGER = _T["HOST_TORCH_VS_EAGER"]
FLOOR_LIMITS = _T["FLOOR_LIMITS"]  # impl: (the floor's PDL, at most x floor)
DECODE_TOKENS = _T["DECODE_TOKENS"]
DECODE_VS_OTHERS = _T["DECODE_VS_OTHERS"]

PASS, FAIL, NA = "PASS", "FAIL", "N/A"


@dataclass(frozen=True)
class Target:
    group: str
    text: str     # the target, in words
    status: str   # PASS | FAIL | N/A
    detail: str   # the numbers

    def to_dict(self) -> dict:
        return {"group": self.group, "target": self.text, "status": self.status, "detail": self.detail}


def _shape(t: int, h: int) -> str:
    return f"{t}x{h}"


def _own() -> dict[str, ops_mod.Targets]:
    """Each benchmarked op's own targets (its declaration's), by op, in the registry's order."""
    return {name: b.targets for name, b in ops_mod.benches().items()}


def _ceiling_targets(records, ceiling: float) -> list[Target]:
    out = []
    op = ops_mod.headline()
    for (t, h), frac in FORWARD_CEILING.items():
        text = f"bf16 {op} {_shape(t, h)}: pyrms >= {frac:.2f} x copy ceiling"
        r = find(records, op, "bfloat16", t, h, "pyrms")
        if r is None:
            out.append(Target("ceiling", text, NA, "not measured in this run"))
            continue
        ratio = r.gbps / ceiling
        out.append(Target("ceiling", text, PASS if ratio >= frac else FAIL,
                          f"{r.gbps:.0f} GB/s = {ratio:.3f} x {ceiling:.0f} GB/s"))
    t, h = EXTRA_OP_SHAPE
    for op, frac in ((op, own.ceiling) for op, own in _own().items() if own.ceiling is not None):
        text = f"bf16 {op} {_shape(t, h)}: pyrms >= {frac:.2f} x copy ceiling (its own bytes)"
        r = find(records, op, "bfloat16", t, h, "pyrms")
        if r is None:
            failed = find(records, op, "bfloat16", t, h, "pyrms", ok_only=False)
            why = f"{failed.status}: {failed.reason}" if failed is not None else "not measured in this run"
            out.append(Target("ceiling", text, NA if failed is None or failed.status == "skipped" else FAIL, why))
            continue
        ratio = r.gbps / ceiling
        out.append(Target("ceiling", text, PASS if ratio >= frac else FAIL,
                          f"{r.gbps:.0f} GB/s = {ratio:.3f} x {ceiling:.0f} GB/s"))
    return out


def _peers_text(peers) -> str:
    labels = [IMPL_LABELS[i] for i in peers]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _pairings(records, op: str, dtype: str, t: int, h: int):
    """Like for like: (pyrms's implementation, its peers, the fastest timed peer or None) for pyrms without PDL
    against the peers without it, and, where a peer with PDL was timed at this shape, pyrms with PDL against
    those peers."""
    out = []
    for mine, peers in LIKE_FOR_LIKE:
        best = best_of(records, op, dtype, t, h, peers)
        if best is not None or mine == NOPDL:
            out.append((mine, peers, best))
    return out


def _vs_others_targets(records, ceiling: float) -> list[Target]:
    out = []
    op = ops_mod.headline()
    shapes = sorted({(r.dtype, r.tokens, r.hidden) for r in records
                     if r.op == op and r.tokens >= VS_OTHERS_MIN_TOKENS})
    for dtype, t, h in shapes:
        for impl, peers, best in _pairings(records, op, dtype, t, h):
            text = (f"{DTYPE_SHORT[dtype]} {op} {_shape(t, h)}: {IMPL_LABELS[impl]} no slower than the fastest of "
                    f"{_peers_text(peers)}")
            mine = find(records, op, dtype, t, h, impl)
            if mine is None or best is None:
                missing = IMPL_LABELS[impl] if mine is None else "no other implementation"
                out.append(Target("vs others", text, NA, f"{missing} timed at this shape"))
                continue
            tolerance = max(mine.summary.spread, best.summary.spread)
            speedup = best.median_us / mine.median_us
            best_frac = best.gbps / ceiling
            detail = (f"{IMPL_LABELS[impl]} {mine.median_us:.2f} us vs {IMPL_LABELS[best.impl]} {best.median_us:.2f} "
                      f"us ({best_frac:.2f} x ceiling): {speedup:.3f}x, spread +-{tolerance * 100:.1f}%")
            ok = mine.median_us <= best.median_us * (1 + tolerance)
            if best_frac < SLOW_OTHER_FRACTION:
                text += f", and >= {SLOW_OTHER_SPEEDUP:.2f}x it (it is under {SLOW_OTHER_FRACTION} x ceiling)"
                ok = ok and speedup >= SLOW_OTHER_SPEEDUP
            out.append(Target("vs others", text, PASS if ok else FAIL, detail))
    return out


def _latency_targets(records) -> list[Target]:
    """At decode shapes, pyrms against the seed kernel, like for like: the seed launches without PDL."""
    out = []
    op = ops_mod.headline()
    mine_label = IMPL_LABELS[NOPDL]
    shapes = sorted({(r.dtype, r.tokens, r.hidden) for r in records
                     if r.op == op and r.tokens <= DECODE_MAX_TOKENS})
    for dtype, t, h in shapes:
        text = (f"{DTYPE_SHORT[dtype]} {op} {_shape(t, h)}: {mine_label} device time per launch <= {LATENCY_VS_SEED} "
                "x seed's")
        mine = find(records, op, dtype, t, h, NOPDL)
        seed = find(records, op, dtype, t, h, "seed")
        if mine is None or seed is None:
            raw = find(records, op, dtype, t, h, "seed" if mine is not None else NOPDL, ok_only=False)
            why = f"{IMPL_LABELS[raw.impl]} {raw.status}: {raw.reason}" if raw is not None and raw.reason else "not timed"
            out.append(Target("latency", text, NA, why))
            continue
        ratio = mine.median_us / seed.median_us
        out.append(Target("latency", text, PASS if ratio <= LATENCY_VS_SEED else FAIL,
                          f"{mine_label} {mine.median_us:.2f} us / seed {seed.median_us:.2f} us = {ratio:.3f}"))
    return out


def _not_timed(records, impl: str, tokens: int, hidden: int) -> str:
    raw = find(records, ops_mod.headline(), "bfloat16", tokens, hidden, impl, ok_only=False)
    if raw is not None and raw.reason:
        return f"{IMPL_LABELS[impl]} {raw.status}: {raw.reason}"
    return f"{IMPL_LABELS[impl]} not timed at {_shape(tokens, hidden)}"


def _no_floor(floors, hidden: int, pdl: bool) -> str:
    raw = floor_mod.copy_floor(floors, hidden, pdl, ok_only=False)
    if raw is not None and raw.reason:
        return f"copy floor {raw.status}: {raw.reason}"
    return f"no copy floor at hidden {hidden} in this run"


def _floor_targets(records, floors) -> list[Target]:
    out = []
    op = ops_mod.headline()
    for impl, (pdl, limit) in FLOOR_LIMITS.items():
        floor_name = f"the one-row copy floor {'with' if pdl else 'without'} PDL (back to back)"
        for h in FLOOR_HIDDEN:
            text = f"bf16 {op} {_shape(1, h)}: {IMPL_LABELS[impl]} device time per launch <= {limit} x {floor_name}"
            mine = find(records, op, "bfloat16", 1, h, impl)
            copy = floor_mod.copy_floor(floors, h, pdl)
            if mine is None or copy is None:
                out.append(Target("floor", text, NA, _not_timed(records, impl, 1, h) if mine is None
                                  else _no_floor(floors, h, pdl)))
                continue
            ratio = mine.median_us / copy.median_us
            out.append(Target("floor", text, PASS if ratio <= limit else FAIL,
                              f"{mine.median_us:.2f} us / floor {copy.median_us:.2f} us = {ratio:.3f}"))
    return out


def _decode_targets(records) -> list[Target]:
    """At each decode shape, like for like: pyrms without PDL against the fastest peer without it, and pyrms
    with PDL against the fastest peer with it where one was timed."""
    out = []
    op = ops_mod.headline()
    for h in FLOOR_HIDDEN:
        for t in DECODE_TOKENS:
            for impl, peers, best in _pairings(records, op, "bfloat16", t, h):
                text = (f"bf16 {op} {_shape(t, h)} (decode): {IMPL_LABELS[impl]} <= {DECODE_VS_OTHERS} x the fastest "
                        f"of {_peers_text(peers)}")
                mine = find(records, op, "bfloat16", t, h, impl)
                if mine is None or best is None:
                    why = _not_timed(records, impl, t, h) if mine is None else "no other implementation timed"
                    out.append(Target("decode", text, NA, why))
                    continue
                ratio = mine.median_us / best.median_us
                out.append(Target("decode", text, PASS if ratio <= DECODE_VS_OTHERS else FAIL,
                                  f"{IMPL_LABELS[impl]} {mine.median_us:.2f} us / {IMPL_LABELS[best.impl]} "
                                  f"{best.median_us:.2f} us = {ratio:.3f}"))
    return out


def _vs_eager_targets(records) -> list[Target]:
    """Each op with a vs_eager target (ops.Targets) at its shape: pyrms without PDL (torch eager launches without
    it) no slower than torch eager (the group is "backward", the op these targets began with)."""
    out = []
    mine_label = IMPL_LABELS[NOPDL]
    for op, (t, h) in ((op, own.vs_eager) for op, own in _own().items() if own.vs_eager is not None):
        text = f"bf16 {op} {_shape(t, h)}: {mine_label} no slower than torch eager"
        mine = find(records, op, "bfloat16", t, h, NOPDL)
        eager = find(records, op, "bfloat16", t, h, "torch")
        if mine is None or eager is None:
            out.append(Target("backward", text, NA, f"{mine_label} not timed" if mine is None else "torch eager not timed"))
            continue
        ratio = mine.median_us / eager.median_us
        out.append(Target("backward", text, PASS if ratio <= 1.0 else FAIL,
                          f"{mine_label} {mine.median_us:.2f} us / torch eager {eager.median_us:.2f} us = {ratio:.3f}"))
    return out


def _host_targets(host: dict | None) -> list[Target]:
    """Each op's calls in the host-time section against its own bare cuLaunchKernel calls (ops.Targets.host and
    host_extras, the variants named as ops.Bench.host_variants and host_extras name them), then the headline
    op's pyrms.torch function against torch eager."""
    op = ops_mod.headline()
    benches = ops_mod.benches().values()
    labels = {k: v for b in benches for k, v in b.host_labels.items()}
    eager = labels.get("torch", "torch eager")
    adapter = f"pyrms.torch.{op}"
    limits = []  # (text, variant, its bare calls, limit)
    for b in benches:
        name, bare = b.host_variants
        if b.targets.host is not None:
            limits.append((f"host: pyrms.{b.name} (raw ints) <= {b.targets.host} x its bare cuLaunchKernel calls", name,
                           bare, b.targets.host))
        limits += [(f"host: {variant} <= {limit} x its bare cuLaunchKernel calls", variant, bare, limit)
                   for variant, limit in b.targets.host_extras.items()]
    text_torch = f"host: {adapter} <= {HOST_TORCH_VS_EAGER} x {eager} per call"
    if not host or "per_call_us" not in host:
        reason = (host or {}).get("reason", "not measured in this run")
        return [Target("host", text, NA, reason) for text in (*(t for t, *_ in limits), text_torch)]
    us, out = host["per_call_us"], []
    for text, name, bare, limit in limits:
        if name in us and bare in us:
            ratio = us[name] / us[bare]
            out.append(Target("host", text, PASS if ratio <= limit else FAIL,
                              f"{us[name]:.2f} us / {us[bare]:.2f} us = {ratio:.2f}"))
        else:
            out.append(Target("host", text, NA, host.get("bare_reason", f"{name} or {bare} not measured")))
    if adapter in us and "torch" in us:
        ratio = us[adapter] / us["torch"]
        out.append(Target("host", text_torch, PASS if ratio <= HOST_TORCH_VS_EAGER else FAIL,
                          f"{us[adapter]:.2f} us vs {us['torch']:.2f} us ({ratio:.2f})"))
    else:
        out.append(Target("host", text_torch, NA, host.get("torch_reason") or host.get("pyrms_torch_reason")
                          or "PyTorch not measured"))
    return out


def evaluate(records, ceiling_gbps: float | None, host: dict | None = None, floors=None) -> list[Target]:
    """Every target, judged with this run's numbers where it has them (``floors``: bench.floor's list)."""
    out = []
    if ceiling_gbps:
        out += _ceiling_targets(records, ceiling_gbps)
        out += _vs_others_targets(records, ceiling_gbps)
    out += _latency_targets(records)
    out += _floor_targets(records, floors)
    out += _decode_targets(records)
    out += _vs_eager_targets(records)
    out += _host_targets(host)
    return out


def tally(targets) -> dict[str, int]:
    counts = {PASS: 0, FAIL: 0, NA: 0}
    for t in targets:
        counts[t.status] += 1
    return counts

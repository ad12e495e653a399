"""Issue 6's targets, issue 11's host targets and issue 12's decode, fused add and backward targets, checked against one run's
numbers: PASS, FAIL or N/A (not measured), each with the numbers that decided it (pure)."""
from __future__ import annotations

from dataclasses import dataclass

from . import floor as floor_mod
from .config import DECODE_MAX_TOKENS, DTYPE_SHORT, FLOOR_HIDDEN, IMPL_LABELS, OTHER_IMPLS
from .results import best_of, find

# bf16 forward, fraction of the copy ceiling, by (tokens, hidden)
FORWARD_CEILING = {(16384, 5120): 0.95, (32768, 8192): 0.95, (4096, 16384): 0.95,
                   (4096, 5120): 0.85, (4096, 8192): 0.85}
VS_OTHERS_MIN_TOKENS = 1024
SLOW_OTHER_FRACTION = 0.85   # where the best other reaches less than this fraction of the ceiling...
SLOW_OTHER_SPEEDUP = 1.10    # ...pyrms must be this much faster
LATENCY_VS_SEED = 0.7        # pyrms device time per launch <= 0.7 x the seed kernel's
EXTRA_OP_SHAPE = (16384, 5120)
# issue 12's: fused add and the backward, fraction of the copy ceiling for their own bytes at EXTRA_OP_SHAPE;
# and the backward at BACKWARD_FEW_SHAPE no slower than torch eager's
EXTRA_OP_CEILING = {"fused_add_rms_norm": 0.95, "rms_norm_backward": 0.85}
BACKWARD_FEW_SHAPE = (32, 5120)
# Issue 11's host targets, each variant against its own bare launches (see bench.host): the op on raw ints,
# arrays through pyrms.rms_norm, and pyrms.torch.rms_norm against torch eager's F.rms_norm.
HOST_VS_BARE = {"pyrms": 1.15, "fused_add_rms_norm": 1.25, "layer_norm": 1.25, "rms_norm_backward": 1.25,
                "rms_norm pyrms.Tensor": 2.0, "rms_norm torch tensors": 2.0}
HOST_TORCH_VS_EAGER = 1.0
# Issue 12's decode targets. At one token, device time per launch against the same run's launch floor:
# the one-row copy of the same hidden, back to back as the sweep times pyrms (bench.floor), pyrms
# (no pdl) against the floor without PDL and pyrms (its default, PDL) against the floor with it. And at
# every decode shape, pyrms against the fastest of the others.
FLOOR_LIMITS = {"pyrms_nopdl": (False, 1.6), "pyrms": (True, 1.3)}  # impl: (the floor's PDL, at most x floor)
DECODE_TOKENS = (1, 5, 32, 128)
DECODE_VS_OTHERS = 0.8

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


def _ceiling_targets(records, ceiling: float) -> list[Target]:
    out = []
    for (t, h), frac in FORWARD_CEILING.items():
        text = f"bf16 rms_norm {_shape(t, h)}: pyrms >= {frac:.2f} x copy ceiling"
        r = find(records, "rms_norm", "bfloat16", t, h, "pyrms")
        if r is None:
            out.append(Target("ceiling", text, NA, "not measured in this run"))
            continue
        ratio = r.gbps / ceiling
        out.append(Target("ceiling", text, PASS if ratio >= frac else FAIL,
                          f"{r.gbps:.0f} GB/s = {ratio:.3f} x {ceiling:.0f} GB/s"))
    for op, frac in EXTRA_OP_CEILING.items():
        t, h = EXTRA_OP_SHAPE
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


def _vs_others_targets(records, ceiling: float) -> list[Target]:
    out = []
    shapes = sorted({(r.dtype, r.tokens, r.hidden) for r in records
                     if r.op == "rms_norm" and r.tokens >= VS_OTHERS_MIN_TOKENS})
    for dtype, t, h in shapes:
        text = f"{DTYPE_SHORT[dtype]} rms_norm {_shape(t, h)}: pyrms no slower than the fastest other"
        mine = find(records, "rms_norm", dtype, t, h, "pyrms")
        best = best_of(records, "rms_norm", dtype, t, h, OTHER_IMPLS)
        if mine is None or best is None:
            missing = "pyrms" if mine is None else "no other implementation"
            out.append(Target("vs others", text, NA, f"{missing} timed at this shape"))
            continue
        tolerance = max(mine.summary.spread, best.summary.spread)
        speedup = best.median_us / mine.median_us
        best_frac = best.gbps / ceiling
        detail = (f"pyrms {mine.median_us:.2f} us vs {IMPL_LABELS[best.impl]} {best.median_us:.2f} us "
                  f"({best_frac:.2f} x ceiling): {speedup:.3f}x, spread +-{tolerance * 100:.1f}%")
        ok = mine.median_us <= best.median_us * (1 + tolerance)
        if best_frac < SLOW_OTHER_FRACTION:
            text += f", and >= {SLOW_OTHER_SPEEDUP:.2f}x it (it is under {SLOW_OTHER_FRACTION} x ceiling)"
            ok = ok and speedup >= SLOW_OTHER_SPEEDUP
        out.append(Target("vs others", text, PASS if ok else FAIL, detail))
    return out


def _latency_targets(records) -> list[Target]:
    out = []
    shapes = sorted({(r.dtype, r.tokens, r.hidden) for r in records
                     if r.op == "rms_norm" and r.tokens <= DECODE_MAX_TOKENS})
    for dtype, t, h in shapes:
        text = f"{DTYPE_SHORT[dtype]} rms_norm {_shape(t, h)}: pyrms device time per launch <= {LATENCY_VS_SEED} x seed's"
        mine = find(records, "rms_norm", dtype, t, h, "pyrms")
        seed = find(records, "rms_norm", dtype, t, h, "seed")
        if mine is None or seed is None:
            raw = find(records, "rms_norm", dtype, t, h, "seed" if mine is not None else "pyrms", ok_only=False)
            why = f"{raw.impl} {raw.status}: {raw.reason}" if raw is not None and raw.reason else "not timed"
            out.append(Target("latency", text, NA, why))
            continue
        ratio = mine.median_us / seed.median_us
        out.append(Target("latency", text, PASS if ratio <= LATENCY_VS_SEED else FAIL,
                          f"pyrms {mine.median_us:.2f} us / seed {seed.median_us:.2f} us = {ratio:.3f}"))
    return out


def _not_timed(records, impl: str, tokens: int, hidden: int) -> str:
    raw = find(records, "rms_norm", "bfloat16", tokens, hidden, impl, ok_only=False)
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
    for impl, (pdl, limit) in FLOOR_LIMITS.items():
        floor_name = f"the one-row copy floor {'with' if pdl else 'without'} PDL (back to back)"
        for h in FLOOR_HIDDEN:
            text = f"bf16 rms_norm {_shape(1, h)}: {IMPL_LABELS[impl]} device time per launch <= {limit} x {floor_name}"
            mine = find(records, "rms_norm", "bfloat16", 1, h, impl)
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
    others = ", ".join(IMPL_LABELS[i] for i in OTHER_IMPLS[:-1]) + f" and {IMPL_LABELS[OTHER_IMPLS[-1]]}"
    out = []
    for h in FLOOR_HIDDEN:
        for t in DECODE_TOKENS:
            text = f"bf16 rms_norm {_shape(t, h)} (decode): pyrms <= {DECODE_VS_OTHERS} x the fastest of {others}"
            mine = find(records, "rms_norm", "bfloat16", t, h, "pyrms")
            best = best_of(records, "rms_norm", "bfloat16", t, h, OTHER_IMPLS)
            if mine is None or best is None:
                why = _not_timed(records, "pyrms", t, h) if mine is None else "no other implementation timed"
                out.append(Target("decode", text, NA, why))
                continue
            ratio = mine.median_us / best.median_us
            out.append(Target("decode", text, PASS if ratio <= DECODE_VS_OTHERS else FAIL,
                              f"pyrms {mine.median_us:.2f} us / {IMPL_LABELS[best.impl]} {best.median_us:.2f} us "
                              f"= {ratio:.3f}"))
    return out


def _backward_few_targets(records) -> list[Target]:
    t, h = BACKWARD_FEW_SHAPE
    text = f"bf16 rms_norm_backward {_shape(t, h)}: pyrms no slower than torch eager"
    mine = find(records, "rms_norm_backward", "bfloat16", t, h, "pyrms")
    eager = find(records, "rms_norm_backward", "bfloat16", t, h, "torch")
    if mine is None or eager is None:
        return [Target("backward", text, NA, "pyrms not timed" if mine is None else "torch eager not timed")]
    ratio = mine.median_us / eager.median_us
    return [Target("backward", text, PASS if ratio <= 1.0 else FAIL,
                   f"pyrms {mine.median_us:.2f} us / torch eager {eager.median_us:.2f} us = {ratio:.3f}")]


def _bare_for(name: str) -> str:
    """The bare launches a host variant is compared with: its op's own, rms_norm's for the array forms."""
    return f"bare {name}" if name in HOST_VS_BARE and not name.startswith(("pyrms", "rms_norm ")) else "bare"


def _host_targets(host: dict | None) -> list[Target]:
    texts = {name: f"host: {'pyrms.rms_norm' if name == 'pyrms' else name}{'' if ' ' in name else ' (raw ints)'} "
                   f"<= {limit} x its bare cuLaunchKernel calls" for name, limit in HOST_VS_BARE.items()}
    text_torch = f"host: pyrms.torch.rms_norm <= {HOST_TORCH_VS_EAGER} x torch eager F.rms_norm per call"
    if not host or "per_call_us" not in host:
        reason = (host or {}).get("reason", "not measured in this run")
        return [Target("host", text, NA, reason) for text in (*texts.values(), text_torch)]
    us, out = host["per_call_us"], []
    for name, limit in HOST_VS_BARE.items():
        bare = _bare_for(name)
        if name in us and bare in us:
            ratio = us[name] / us[bare]
            out.append(Target("host", texts[name], PASS if ratio <= limit else FAIL,
                              f"{us[name]:.2f} us / {us[bare]:.2f} us = {ratio:.2f}"))
        else:
            out.append(Target("host", texts[name], NA, host.get("bare_reason", f"{name} or {bare} not measured")))
    if "pyrms.torch.rms_norm" in us and "torch" in us:
        ratio = us["pyrms.torch.rms_norm"] / us["torch"]
        out.append(Target("host", text_torch, PASS if ratio <= HOST_TORCH_VS_EAGER else FAIL,
                          f"{us['pyrms.torch.rms_norm']:.2f} us vs {us['torch']:.2f} us ({ratio:.2f})"))
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
    out += _backward_few_targets(records)
    out += _host_targets(host)
    return out


def tally(targets) -> dict[str, int]:
    counts = {PASS: 0, FAIL: 0, NA: 0}
    for t in targets:
        counts[t.status] += 1
    return counts

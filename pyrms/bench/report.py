"""What a run prints and writes: the header that explains the columns, the tables, the host and
graph sections, the targets, the JSON and the plot. Pure functions of the results, but for the files."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from . import floor as floor_mod
from . import ops as ops_mod
from . import targets as targets_mod
from .config import (DECODE_MAX_TOKENS, DTYPE_SHORT, IMPL_LABELS, IMPL_STYLES, IMPLS, LIKE_FOR_LIKE, NOPDL,
                     OTHER_IMPLS, OTHER_PDL_IMPLS, PYRMS_IMPLS)
from .results import FAILED, OK, SKIPPED, Record, best_of, find
from .torch_impls import FLASHINFER_EXT_NOTE

DASH = "-"
SHORT_LABELS = {"pyrms": "pyrms", "pyrms_nopdl": "nopdl", "seed": "seed", "torch": "eager", "compile": "compile",
                "triton": "triton", "liger": "liger", "flashinfer": "flashi", "flashinfer_pdl": "fi+pdl"}


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.0f} MiB"


def header(info: dict, ceiling, ops_run) -> str:
    d, v = info["device"], info["versions"]
    cc = "".join(map(str, d["compute_capability"]))
    versions = ", ".join(f"{k} {v[k]}" for k in ("cuda_driver", "nvrtc", "cuda-bindings", "torch", "triton") if v.get(k))
    lines = [
        "pyrms.bench: RMSNorm against the copy ceiling and against other implementations",
        f"device:  {d['name']} (sm_{cc}, {d['multiprocessors']} SMs, L2 {_mib(d['l2_bytes'])}, "
        f"{d['memory_bytes'] / 1e9:.0f} GB); {versions}",
        f"command: {info['command']}",
    ]
    if ceiling is not None:
        s = ceiling.summary
        lines.append(f"copy ceiling: {ceiling.gbps:.0f} GB/s = (read + write) bytes of a {_mib(ceiling.copy_bytes)} "
                     f"device-to-device copy / its median time ({s.median:.1f} us, p10-p90 {s.p10:.1f}-{s.p90:.1f} us)")
    lines += [
        "",
        "How to read the tables. RMSNorm is memory-bound: its floor is the bytes a call must move over the copy",
        "ceiling. Bytes per call (T tokens, H hidden, in the storage dtype):",
    ]
    for name in ops_run:
        lines.append(f"  {name}: {ops_mod.get(name).formula}")
    lines += [
        "  floor us  the bytes / copy ceiling: no kernel runs much faster",
        "  us        device time per launch, median: CUDA events around batches of back-to-back launches queued",
        "            behind a spin kernel (so host time is excluded), inputs rotated over > 2x L2 (so none is cached)",
        "  GB/s      bytes / median time;  %ceil: GB/s / copy ceiling",
        "  +-%       run-to-run spread: (max - min of the per-round medians) / median; rounds are whole passes",
        "            over all implementations, so a difference smaller than this is noise",
        "  pyrms us  pyrms as it launches by default, with programmatic dependent launch (PDL); nopdl: pdl=False",
        "  ratios    like for like, > 1 means pyrms is faster:",
        f"  xbest     (fastest of {join_labels(OTHER_IMPLS)}, all launched without PDL) time / pyrms (no pdl) time",
        f"  xpdl      (fastest of {join_labels(OTHER_PDL_IMPLS)}, launched with PDL) time / pyrms (with PDL) time",
        "  xseed     seed kernel time (it launches without PDL) / pyrms (no pdl) time",
        f"  {DASH}         not run (reason under the table); FAIL: output failed validation, never timed",
        "Every implementation's output was checked against a float64 reference before it was timed.",
    ]
    return "\n".join(lines)


def join_labels(impls) -> str:
    """'A, B and C' of the implementations' labels."""
    labels = [IMPL_LABELS[i] for i in impls]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def ratio(records, op: str, dtype: str, tokens: int, hidden: int, mine: str, peers) -> str:
    """(fastest timed of ``peers``) time / ``mine``'s time at one shape, two decimals, or DASH where either is
    missing."""
    me = find(records, op, dtype, tokens, hidden, mine)
    best = best_of(records, op, dtype, tokens, hidden, peers)
    return f"{best.median_us / me.median_us:.2f}" if me is not None and best is not None else DASH


def _cell(rec, fmt, value) -> str:
    if rec is None:
        return DASH
    if rec.status == FAILED:
        return "FAIL"
    if rec.status != OK or rec.median_us is None:
        return DASH
    return fmt.format(value(rec))


def _shapes(records, op, dtype):
    return sorted({(r.hidden, r.tokens) for r in records if r.op == op and r.dtype == dtype})


def _impls(records, op, dtype, order):
    present = {r.impl for r in records if r.op == op and r.dtype == dtype}
    return [i for i in order if i in present]


def _ratio_columns(others) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, pyrms's implementation, its peers) of each like-for-like ratio that has a peer among ``others``."""
    pairings = [(label, mine, peers) for label, (mine, peers) in zip(("xbest", "xpdl"), LIKE_FOR_LIKE)]
    return [(label, mine, peers) for label, mine, peers in pairings + [("xseed", NOPDL, ("seed",))]
            if any(i in peers for i in others)]


def _missing_ratio_notes(ratios, impls) -> list[str]:
    """A note for each ratio whose pyrms implementation the run did not time."""
    lines = []
    for me in dict.fromkeys(me for _, me, _ in ratios if me not in impls):
        labels = " or ".join(label for label, m, _ in ratios if m == me)
        lines.append(f"  note: no {labels}: the ratio is of {IMPL_LABELS[me]}, which this run did not time")
    return lines


def table(records, op: str, dtype: str, ceiling_gbps: float, impl_order) -> str:
    """Bandwidth table: pyrms in detail, the others' GB/s, and the ratios, each of like with like (pyrms without
    PDL against the peers without it, pyrms with PDL against the peers with it; the header says which)."""
    impls = _impls(records, op, dtype, impl_order)
    others = [i for i in impls if i != "pyrms"]
    ratios = _ratio_columns(others)
    title = f"{op} {dtype}: GB/s per implementation (copy ceiling {ceiling_gbps:.0f} GB/s)"
    head = (f"{'tokens':>6} {'hidden':>6} {'MB':>8} {'floor us':>9} | {'pyrms us':>9} {'GB/s':>6} {'%ceil':>5} {'+-%':>5} |"
            + "".join(f" {SHORT_LABELS[i]:>7}" for i in others) + " |"
            + "".join(f" {label:>6}" for label, _, _ in ratios))
    lines = [title, head, "-" * len(head)]
    for hidden, tokens in _shapes(records, op, dtype):
        mine = find(records, op, dtype, tokens, hidden, "pyrms", ok_only=False)
        any_rec = next(r for r in records if (r.op, r.dtype, r.tokens, r.hidden) == (op, dtype, tokens, hidden))
        nbytes = any_rec.bytes
        row = f"{tokens:>6} {hidden:>6} {nbytes / 1e6:>8.2f} {nbytes / ceiling_gbps / 1e3:>9.2f} |"
        row += f" {_cell(mine, '{:9.2f}', lambda r: r.median_us):>9}"
        timed = mine is not None and mine.status == OK
        row += f" {_cell(mine, '{:6.0f}', lambda r: r.gbps) if timed else DASH:>6}"
        row += f" {_cell(mine, '{:5.0%}', lambda r: r.gbps / ceiling_gbps) if timed else DASH:>5}"
        row += f" {_cell(mine, '{:5.1%}', lambda r: r.summary.spread) if timed else DASH:>5} |"
        for i in others:
            rec = find(records, op, dtype, tokens, hidden, i, ok_only=False)
            row += f" {_cell(rec, '{:7.0f}', lambda r: r.gbps):>7}"
        cells = [ratio(records, op, dtype, tokens, hidden, me, peers) for _, me, peers in ratios]
        lines.append(row + " |" + "".join(f" {c:>6}" for c in cells))
    lines += _reasons(records, op, dtype) + _missing_ratio_notes(ratios, impls)
    return "\n".join(lines)


def _median_spread(rec) -> str:
    """A record's cell of the latency-style tables: its median µs and run-to-run spread (or why it has none)."""
    return _cell(rec, "{}", lambda r: f"{r.median_us:.2f} +-{r.summary.spread:.0%}")


def latency_table(records, op: str, dtype: str, impl_order) -> str:
    """Device time per launch (median µs) of every implementation, with its spread."""
    impls = _impls(records, op, dtype, impl_order)
    head = f"{'tokens':>6} {'hidden':>6} |" + "".join(f" {IMPL_LABELS[i]:>15}" for i in impls)
    lines = [f"{op} {dtype}: device time per launch, us (median +- run-to-run spread)", head, "-" * len(head)]
    for hidden, tokens in _shapes(records, op, dtype):
        row = f"{tokens:>6} {hidden:>6} |"
        for i in impls:
            rec = find(records, op, dtype, tokens, hidden, i, ok_only=False)
            row += f" {_median_spread(rec):>15}"
        lines.append(row)
    return "\n".join(lines)


def after_gemm_table(records, op: str, dtype: str, impl_order) -> str:
    """One (op, dtype) after a GEMM, in a CUDA graph: µs per norm of every implementation with its spread, the
    GEMM's own µs, and the like-for-like ratios."""
    impls = _impls(records, op, dtype, impl_order)
    ratios = _ratio_columns([i for i in impls if i != "pyrms"])
    r0 = next(r for r in records if (r.op, r.dtype) == (op, dtype))
    head = (f"{'tokens':>6} {'hidden':>6} {'K':>6} {'GEMM us':>8} |" + "".join(f" {IMPL_LABELS[i]:>16}" for i in impls)
            + " |" + "".join(f" {label:>6}" for label, _, _ in ratios))
    lines = [f"{op} {dtype} after a GEMM, in a CUDA graph: device us per norm (median +- run-to-run spread)",
             f"  = (replay of {r0.pairs} x (GEMM -> norm) - replay of the {r0.pairs} GEMMs alone) / {r0.pairs}; each "
             "GEMM a torch.matmul [T, K] @ [K, H] of its own",
             "  operands writing the norm's input; GEMM us: one GEMM of the graph without the norms. The two graphs",
             "  alternate sample by sample (each sample a batch of replays behind the spin kernel); xbest and xpdl as",
             "  the header explains them (> 1: pyrms is faster)",
             head, "-" * len(head)]
    for hidden, tokens in _shapes(records, op, dtype):
        at = [r for r in records if (r.op, r.dtype, r.tokens, r.hidden) == (op, dtype, tokens, hidden)]
        gemm = next((r.gemm_summary for r in at if r.gemm_summary is not None), None)
        row = f"{tokens:>6} {hidden:>6} {at[0].k:>6} {f'{gemm.median:.2f}' if gemm else DASH:>8} |"
        for i in impls:
            rec = find(records, op, dtype, tokens, hidden, i, ok_only=False)
            row += f" {_median_spread(rec):>16}"
        cells = [ratio(records, op, dtype, tokens, hidden, me, peers) for _, me, peers in ratios]
        lines.append(row + " |" + "".join(f" {c:>6}" for c in cells))
    lines += _reasons(records, op, dtype) + _missing_ratio_notes(ratios, impls)
    return "\n".join(lines)


def after_gemm_section(after) -> str:
    """The after-GEMM tables, one per (op, dtype), or why the section was not measured (None: not asked for)."""
    if after is None:
        return ""
    if isinstance(after, dict):
        return f"After a GEMM, in a CUDA graph: not measured ({after.get('reason', 'unknown')})"
    if not after:
        return "After a GEMM, in a CUDA graph: no shape of the run has few enough tokens (--after-gemm-tokens)"
    return "\n\n".join(after_gemm_table(after, op, dtype, IMPLS) for op in dict.fromkeys(r.op for r in after)
                       for dtype in dict.fromkeys(r.dtype for r in after if r.op == op))


def _reasons(records, op, dtype) -> list[str]:
    """One line per distinct (implementation, status, reason), with the shapes it applies to."""
    groups: dict = {}
    for r in records:
        if r.op == op and r.dtype == dtype and r.status in (SKIPPED, FAILED):
            groups.setdefault((r.impl, r.status, r.reason), []).append(f"{r.tokens}x{r.hidden}")
    lines = []
    for (impl, status, reason), shapes in groups.items():
        where = ", ".join(shapes) if len(shapes) <= 6 else f"{len(shapes)} shapes"
        lines.append(f"  {IMPL_LABELS[impl]} {status} at {where}: {reason}")
    notes = sorted({n for r in records if r.op == op and r.dtype == dtype for n in r.notes
                    if n.startswith(("dγ not validated", FLASHINFER_EXT_NOTE))})
    redone = sum(r.host_bound for r in records if r.op == op and r.dtype == dtype)
    if redone:
        notes.append(f"{redone} samples were redone with a longer spin: the host had not queued the batch in time")
    return lines + [f"  note: {n}" for n in notes]


def _spread_cell(f) -> str:
    if f is None:
        return DASH
    if f.status == FAILED:
        return "FAIL"
    return f"{f.median_us:.2f} +-{f.summary.spread:.0%}" if f.median_us is not None else DASH


def floor_section(floors) -> str:
    """The launch floor: each kernel's four ways, with the reasons for any not timed."""
    if not floors:
        return ""
    lines = ["Launch floor: device time per launch, us (median +- run-to-run spread), of two kernels that do almost",
             "nothing, both PDL-aware (griddepcontrol.wait before the first global read, launch_dependents after it):",
             f"an empty kernel (1 block x {floor_mod.EMPTY_THREADS} threads) and a one-row copy (1 block, 16 bytes per "
             "thread, of a",
             f"bf16 row of H elements, rotated over the sets {ops_mod.headline()} uses at 1 x H). Back to back: timed as "
             "the sweep",
             "times every implementation; graph: N launches captured into a CUDA graph and replayed, replay time / N;",
             "+ PDL: every launch made with programmatic dependent launch allowed.",
             f"  {'kernel':<10} {'threads':>7} {'sets':>5} | {'back to back':>12} {'+ PDL':>12} | {'graph':>12} "
             f"{'+ PDL':>12} | {'N':>5}"]
    reasons: dict = {}
    for label in dict.fromkeys(f.label for f in floors):
        ways = {(f.method, f.pdl): f for f in floors if f.label == label}
        first = next(iter(ways.values()))
        graph = ways.get((floor_mod.GRAPH, False))
        row = f"  {label:<10} {first.threads or DASH:>7} {first.sets:>5} |"
        for method in (floor_mod.BACK_TO_BACK, floor_mod.GRAPH):
            row += "".join(f" {_spread_cell(ways.get((method, pdl))):>12}" for pdl in (False, True)) + " |"
        lines.append(row + f" {graph.launches if graph is not None and graph.launches else DASH:>5}")
        for f in ways.values():
            if f.status != OK:
                reasons.setdefault((f.status, f.reason), []).append(label)
    for (status, reason), labels in reasons.items():
        lines.append(f"  {', '.join(dict.fromkeys(labels))} {status}: {reason}")
    return "\n".join(lines)


def decode_floor_table(records, floors) -> str:
    """The headline op in bf16 at <= DECODE_MAX_TOKENS tokens against the one-row copy floor of the same hidden
    (back to back, as the sweep times it): pyrms (no pdl) against the floor without PDL, pyrms (its default,
    PDL) against the floor with it."""
    op = ops_mod.headline()
    shapes = sorted({(r.hidden, r.tokens) for r in records
                     if r.op == op and r.dtype == "bfloat16" and r.tokens <= DECODE_MAX_TOKENS})
    if not floors or not shapes:
        return ""
    head = (f"{'tokens':>6} {'hidden':>6} | {'no pdl us':>9} {'floor us':>9} {'x floor':>7} | {'pyrms us':>9} "
            f"{'PDL floor':>9} {'x floor':>7}")
    lines = [f"{op} bfloat16 decode shapes against the launch floor: the one-row copy of the same hidden, back to",
             "back (x floor = time / floor; 1.00 is as fast as a launch that moves one row); no pdl: pyrms (no pdl)",
             "against the floor without PDL; pyrms (pdl=True, its default) against the floor with it", head, "-" * len(head)]
    for hidden, tokens in shapes:
        groups = [f"{tokens:>6} {hidden:>6}"]
        for impl, pdl in (("pyrms_nopdl", False), ("pyrms", True)):
            mine = find(records, op, "bfloat16", tokens, hidden, impl, ok_only=False)
            copy = floor_mod.copy_floor(floors, hidden, pdl)
            timed = mine is not None and mine.status == OK and mine.median_us is not None
            ratio = f"{mine.median_us / copy.median_us:.2f}" if timed and copy is not None else DASH
            floor_us = f"{copy.median_us:.2f}" if copy is not None else DASH
            groups.append(f"{_cell(mine, '{:9.2f}', lambda r: r.median_us):>9} {floor_us:>9} {ratio:>7}")
        lines.append(" | ".join(groups))
    return "\n".join(lines)


def host_section(host: dict | None) -> str:
    if not host:
        return ""
    if "per_call_us" not in host:
        return f"Host time per call: not measured ({host.get('reason', 'unknown')})"
    us, spread = host["per_call_us"], host["spread"]
    t, h = host["shape"]
    labels = {"bare": "bare cuLaunchKernel, arguments packed once (the floor)"}
    for bench in ops_mod.benches().values():  # the variants' labels, where their ops declare them
        labels.update(bench.host_labels)
    lines = [f"Host time per call ({t}x{h} {host['dtype']}; {host['batches']} batches of {host['calls_per_batch']} calls, "
             "each batch starting on an idle device so the GPU never holds the host back; median, p10-p90 spread):"]
    for name, value in us.items():
        own = name.removesuffix(" bound")  # an op, and its call bound (pyrms.bind), vs the op's own bare calls
        base = value if name.startswith("bare") else us.get(f"bare {own}", us.get("bare"))
        ratio = f"  {value / base:5.2f} x bare" if base else ""
        lines.append(f"  {labels.get(name, name):<58} {value:7.2f} us +-{spread[name]:.0%}{ratio}")
    for name, reason in host.get("skipped", {}).items():
        lines.append(f"  {name}: not measured ({reason})")
    for name, reason in host.get("not_bound", {}).items():
        lines.append(f"  {name} bound: not measured ({reason})")
    for key in ("bare_reason", "torch_reason", "pyrms_torch_reason"):
        if key in host:
            lines.append(f"  ({host[key]})")
    return "\n".join(lines)


def graph_section(graphs: dict | None) -> str:
    if not graphs:
        return ""
    if "shapes" not in graphs:
        return f"CUDA graphs: not measured ({graphs.get('reason', 'unknown')})"
    ops = {s["op"] for s in graphs["shapes"] if "op" in s}  # the headline op's (older results do not say)
    calls = f"pyrms.{ops.pop()}" if len(ops) == 1 else "headline-op"
    lines = [f"CUDA graphs: N {calls} launches captured on a pyrms Stream (pyrms.driver.capture) and replayed,",
             "against the same N launches made one by one on that stream (medians; host = time to queue them,",
             "device span = first to last event on the GPU, end to end = queue + wait for completion):",
             f"  {'shape':>10} {'N':>4} {'mode':>11} {'host us':>9} {'device us':>10} {'end-to-end us':>14} {'per launch':>11}"]
    for s in graphs["shapes"]:
        shape = f"{s['tokens']}x{s['hidden']}"
        for mode, label in (("one_by_one", "one by one"), ("graph", "graph")):
            m = s["median"][mode]
            lines.append(f"  {shape:>10} {s['launches']:>4} {label:>11} {m['host_us']:9.1f} {m['device_us']:10.1f} "
                         f"{m['end_to_end_us']:14.1f} {m['end_to_end_us'] / s['launches']:9.2f}us")
            shape = ""
        speed = s["median"]["one_by_one"]["end_to_end_us"] / s["median"]["graph"]["end_to_end_us"]
        same = "identical" if s["graph_output_matches"] else "DIFFERENT (a bug)"
        lines.append(f"  {'':>10} graph replay {speed:.2f}x faster end to end; its output is {same} to one-by-one's")
    return "\n".join(lines)


def targets_section(targets) -> str:
    counts = targets_mod.tally(targets)
    lines = [f"Targets: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['N/A']} N/A "
             "(not measured here)"]
    for t in targets:
        lines.append(f"  {t.status:<4}  {t.text}: {t.detail}")
    return "\n".join(lines)


def full_text(info, ceiling, ceiling_end, records, host, graphs, targets, config, elapsed_s, files,
              floors=None, after_gemm=None) -> str:
    parts = [header(info, ceiling, config.ops)]
    parts += [f"note: {n}" for n in config.notes]
    if ceiling is not None:
        for op in dict.fromkeys(r.op for r in records):
            for dtype in dict.fromkeys(r.dtype for r in records if r.op == op):
                parts.append(latency_table(records, op, dtype, IMPLS))
                parts.append(table(records, op, dtype, ceiling.gbps, IMPLS))
    parts.append(after_gemm_section(after_gemm))
    parts += [floor_section(floors), decode_floor_table(records, floors), host_section(host), graph_section(graphs)]
    if ceiling is not None and ceiling_end is not None:
        drift = ceiling_end.gbps / ceiling.gbps - 1
        parts.append(f"copy ceiling again at the end: {ceiling_end.gbps:.0f} GB/s ({drift:+.1%} from the start)")
    parts.append(targets_section(targets))
    if files:
        parts.append("wrote: " + ", ".join(str(f) for f in files))
    parts.append(f"finished in {elapsed_s:.1f} s")
    return "\n\n".join(p for p in parts if p)


def to_json(info, config, ceiling, ceiling_end, records, host, graphs, targets, elapsed_s, partial,
            floors=None, after_gemm=None) -> dict:
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(config).items()}
    cfg["shapes"] = [str(s) for s in config.shapes]
    if config.extra_op_shapes is not None:
        cfg["extra_op_shapes"] = [str(s) for s in config.extra_op_shapes]
    gbps = ceiling.gbps if ceiling is not None else None
    return {
        "schema": 1, "partial": partial, **info, "config": cfg, "elapsed_s": elapsed_s,
        "copy_ceiling": ceiling.to_dict() if ceiling is not None else None,
        "copy_ceiling_end": ceiling_end.to_dict() if ceiling_end is not None else None,
        "results": [r.to_dict(gbps) for r in records],
        "launch_floor": [f.to_dict() for f in floors] if floors is not None else None,
        "after_gemm": [r.to_dict() for r in after_gemm] if isinstance(after_gemm, list) else after_gemm,
        "host_overhead": host, "graphs": graphs,
        "targets": [t.to_dict() for t in targets],
    }


def write_json(path: Path, data: dict) -> None:
    """Atomically: a partial file is never left half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


PLOT_CAPTION = ("GB/s (bytes one call moves / median device time per launch) against tokens; one panel per op, "
                "dtype and hidden size; dashed: the copy ceiling measured in the same run")


def plot_lines(records) -> dict[tuple[str, str, int], dict[str, list[tuple[int, float]]]]:
    """What the plot draws: per panel (op, dtype, hidden) with timed results, in the order first met, per
    implementation (in IMPLS order) its (tokens, GB/s) points, by tokens."""
    panels: dict = {}
    for r in records:
        if r.status == OK and r.gbps:
            panels.setdefault((r.op, r.dtype, r.hidden), {})
    for key, lines in panels.items():
        for impl in IMPLS:
            points = sorted((r.tokens, r.gbps) for r in records
                            if (r.op, r.dtype, r.hidden, r.impl) == (*key, impl) and r.status == OK and r.gbps)
            if points:
                lines[impl] = points
    return panels


def write_plot(path: Path, records, ceiling_gbps: float, title: str) -> str | None:
    """GB/s against tokens (PLOT_CAPTION, above ``title``), a row of panels per (op, dtype), one line per
    implementation in its own IMPL_STYLES colour and marker. Returns None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"no plot: matplotlib is not importable ({type(exc).__name__})"
    import textwrap

    panels = plot_lines(records)
    if not panels:
        return "no plot: nothing was timed"
    rows: dict = {}
    for op, dtype, hidden in panels:
        rows.setdefault((op, dtype), []).append(hidden)
    cols = max(len(h) for h in rows.values())
    fig, axes = plt.subplots(len(rows), cols, figsize=(4.2 * cols, 3.4 * len(rows)), squeeze=False, sharey="row")
    legend: dict = {}
    for row, ((op, dtype), hiddens) in enumerate(rows.items()):
        for col in range(len(hiddens), cols):
            axes[row][col].set_visible(False)
        for col, hidden in enumerate(sorted(hiddens)):
            ax, tokens = axes[row][col], set()
            for impl, points in panels[(op, dtype, hidden)].items():
                tokens.update(t for t, _ in points)
                mine = impl in PYRMS_IMPLS
                color, marker = IMPL_STYLES[impl]
                line, = ax.plot(*zip(*points), color=color, marker=marker, linewidth=2.2 if mine else 1.2,
                                markersize=5, zorder=3 if mine else 2, label=IMPL_LABELS[impl])
                legend.setdefault(IMPL_LABELS[impl], line)
            ceiling = ax.axhline(ceiling_gbps, color="black", linestyle="--", linewidth=1)
            legend.setdefault(f"copy ceiling ({ceiling_gbps:.0f} GB/s)", ceiling)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(tokens), [str(t) for t in sorted(tokens)], fontsize=7)
            ax.minorticks_off()
            ax.set_ylim(0, ceiling_gbps * 1.08)
            ax.set_title(f"{op} {DTYPE_SHORT[dtype]}, hidden {hidden}", fontsize=9)
            ax.set_xlabel("tokens", fontsize=8)
            if col == 0:
                ax.set_ylabel("GB/s (bytes moved / device time)", fontsize=8)
            ax.grid(True, alpha=0.3)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=len(legend), fontsize=8, frameon=False)
    fig.suptitle("\n".join(textwrap.wrap(PLOT_CAPTION, 140) + textwrap.wrap(title, 140)), fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def plot_title(info: dict) -> str:
    """The plot's title under its caption: the device and the command that made the run."""
    return f"{info['device']['name']}: {info['command']}"


def replot(json_path: Path, png_path: Path | None = None) -> str | None:
    """Draw a finished run's plot again from its JSON (to ``png_path``, default the JSON's name with .png), as
    write_plot draws it now. Returns None when written, else why not."""
    data = json.loads(Path(json_path).read_text())
    png_path = Path(json_path).with_suffix(".png") if png_path is None else Path(png_path)
    return write_plot(png_path, [Record.from_dict(r) for r in data["results"]], data["copy_ceiling"]["gbps"],
                      plot_title(data))

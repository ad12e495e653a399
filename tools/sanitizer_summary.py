#!/usr/bin/env python3
"""Summarize a tools/run_sanitizers.sh output directory: one line per compute-sanitizer tool.

Reads TOOL.K.log (the sanitizer's and tools/sanitize_all.py's output of shard K), TOOL.K.rc (its exit
status) and TOOL.K.seconds; writes summary.txt and summary.json beside them and prints the summary.
A shard passes when its log has the matrix's closing line with 0 failed, the sanitizer's own summary
line with 0 errors, and exit status 0. Exit status: 0 if every shard of every tool passed, else 1.

    python -m tools.sanitizer_summary OUT_DIR
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
MATRIX_RE = re.compile(r"^sanitize_all: (\d+) launches checked, (\d+) failed \((\d+) kernel launches", re.M)
ERROR_RE = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?", re.M)
PROGRESS_RE = re.compile(r"^  \[(\d+) s\] (\d+) launches: (.*)$", re.M)  # sanitize_all.py --verbose
RACE_RE = re.compile(r"^=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", re.M)


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return default


def shard_result(log_path: Path) -> dict:
    """What one shard's log, exit status and duration say."""
    text = _read(log_path)
    stem = log_path.name[: -len(".log")]
    rc_text = _read(log_path.with_name(stem + ".rc")).strip()
    seconds = _read(log_path.with_name(stem + ".seconds")).strip()
    result = {"shard": stem, "rc": int(rc_text) if rc_text.lstrip("-").isdigit() else None,
              "seconds": float(seconds) if re.fullmatch(r"\d+(\.\d+)?", seconds) else None,
              "launches": None, "failed": None, "kernel_launches": None, "errors": None, "warnings": 0,
              "sanitizer_line": None, "problems": []}
    matrix = MATRIX_RE.findall(text)
    if matrix:
        launches, failed, kernels = (int(v) for v in matrix[-1])
        result.update(launches=launches, failed=failed, kernel_launches=kernels)
    else:
        progress = PROGRESS_RE.findall(text)
        reached = f"; its last progress line: {progress[-1][1]} launches after {progress[-1][0]} s ({progress[-1][2]})" if progress else ""
        result["problems"].append("no 'sanitize_all: ... launches checked' line (crashed, aborted or timed out)" + reached)
    race = RACE_RE.findall(text)
    errors = ERROR_RE.findall(text)
    if race:
        hazards, errs, warnings = (int(v) for v in race[-1])
        result.update(errors=errs, warnings=warnings)
        result["sanitizer_line"] = re.findall(r"^=+ (RACECHECK SUMMARY: .*)$", text, re.M)[-1]
    elif errors:
        result["errors"] = int(errors[-1])
        result["sanitizer_line"] = re.findall(r"^=+ (ERROR SUMMARY: .*)$", text, re.M)[-1]
    else:
        result["problems"].append("no sanitizer summary line")
    if result["rc"] == 124 or result["rc"] == 137:
        result["problems"].append(f"timed out (exit {result['rc']})")
    elif result["rc"] not in (0, None):
        result["problems"].append(f"exit status {result['rc']}")
    elif result["rc"] is None:
        result["problems"].append("no exit status recorded")
    if result["failed"]:
        result["problems"].append(f"{result['failed']} checks failed")
    if result["errors"]:
        result["problems"].append(f"{result['errors']} sanitizer errors")
    for line in re.findall(r"^(?:FAIL|ERROR|ABORT) .*$", text, re.M)[:3]:
        result["problems"].append(line[:300])
    return result


def summarize(out_dir: Path) -> tuple[list[str], dict, bool]:
    tools, lines, ok_all = {}, [], True
    for tool in TOOLS:
        shards = [shard_result(p) for p in sorted(out_dir.glob(f"{tool}.*.log"))]
        if not shards:
            continue
        def total(key):
            values = [s[key] for s in shards]
            return None if any(v is None for v in values) else sum(values)
        ok = all(not s["problems"] for s in shards)
        ok_all &= ok
        seconds = max((s["seconds"] or 0.0) for s in shards)
        sanitizer_lines = sorted({s["sanitizer_line"] or "none" for s in shards})
        tools[tool] = {"shards": shards, "launches": total("launches"), "failed": total("failed"),
                       "kernel_launches": total("kernel_launches"), "errors": total("errors"),
                       "warnings": total("warnings"), "seconds": seconds, "pass": ok}
        t = {k: "?" if v is None else v for k, v in tools[tool].items()}
        line = (f"{tool}: {t['launches']} launches checked ({t['kernel_launches']} kernel launches), {t['failed']} failed; "
                f"sanitizer errors {t['errors']}" + (f", warnings {t['warnings']}" if tool == "racecheck" else "") +
                f"; {len(shards)} processes, slowest {seconds:.0f} s; " + " | ".join(sanitizer_lines) +
                f" -> {'PASS' if ok else 'FAIL'}")
        lines.append(line)
        for s in shards:
            if s["problems"]:
                lines.append(f"  {s['shard']}: " + "; ".join(s["problems"])[:400])
    if not tools:
        lines.append(f"no TOOL.K.log files in {out_dir}")
        ok_all = False
    else:
        launches = sum(t["launches"] or 0 for t in tools.values())
        errors = sum(t["errors"] or 0 for t in tools.values())
        failed = sum(t["failed"] or 0 for t in tools.values())
        lines.append(f"TOTAL: {len(tools)} tools, {launches} launches checked, {failed} failed, {errors} sanitizer "
                     f"errors -> {'PASS' if ok_all else 'FAIL'}")
    return lines, tools, ok_all


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="the directory tools/run_sanitizers.sh wrote")
    out_dir = parser.parse_args(argv).out_dir
    lines, tools, ok = summarize(out_dir)
    header = _read(out_dir / "environment.txt").strip()
    text = "\n".join(([header, ""] if header else []) + lines) + "\n"
    (out_dir / "summary.txt").write_text(text)
    (out_dir / "summary.json").write_text(json.dumps({"pass": ok, "tools": tools}, indent=1) + "\n")
    print(text, end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Run every hostile input of tests/support/hostile_cases.py and write the table docs/hostile_inputs.md.

Each case runs as tests/test_hostile_inputs.py runs it (no GPU needed: a fake device where one is
needed, a launch sentinel in place of cuLaunchKernel), in this one process, which must survive them
all. The table gives, per input, the exception raised and its message, whether anything reached
cuLaunchKernel, and whether the outcome is the one specified or a known defect.

    python -m tools.hostile_table [--out docs/hostile_inputs.md] [--real-device]

--real-device: run the cases that need a device on the real driver (on the GPU machine).
Prints "hostile_table: N inputs, ..." last; exit status 1 if any case launched or ended otherwise
than its list entry says (as specified, or as its known defect).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tests.support.hostile_cases import CASES, run_case

ROOT = Path(__file__).resolve().parent.parent

ENVIRONMENTS = {"nothing": "as is", "device": "device", "no-driver": "no driver"}


def display(text: str, limit: int = 260, code: bool = False) -> str:
    """Text for one table cell: machine-specific details masked, long text cut, pipes escaped; as a
    code span (messages), or as prose with the dunder names' underscores escaped."""
    text = re.sub(r"/tmp/pyrms-no-cuda-[^/\s;)]+", "$EMPTY_CUDA_HOME", text).replace(str(ROOT), "<checkout>")
    text = re.sub(r" at 0x[0-9a-f]+", " at 0x…", text)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    text = text.replace("|", "\\|")
    if code:
        return f"`` {text} ``" if "`" in text else f"`{text}`"
    return text.replace("__", "\\_\\_")


def as_the_defect_says(case, outcome) -> bool:
    """Whether the outcome is the defect's recorded `actual`: "Type: message", "..." for any text."""
    kind, _, message = case.actual.partition(": ")
    if outcome.raised != kind:
        return False
    at = 0
    for fragment in message.split("..."):
        at = outcome.message.find(fragment, at)
        if at < 0:
            return False
        at += len(fragment)
    return True


def verdict(case, outcome) -> str:
    specified = (outcome.launches == 0 and outcome.exception is not None and isinstance(outcome.exception, case.exc)
                 and case.message in outcome.message)
    if specified:
        return "as specified" if not case.bug else "FIXED? (marked as a defect, but behaves as specified)"
    if case.bug and as_the_defect_says(case, outcome):
        return "known defect"
    return "UNEXPECTED"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "hostile_inputs.md")
    parser.add_argument("--real-device", action="store_true", help="device cases on the real driver")
    args = parser.parse_args(argv)
    if args.real_device:
        from pyrms import driver

        reason = driver.unavailable_reason()
        if reason is not None:
            print(f"hostile_table: --real-device needs a GPU: {reason}", file=sys.stderr)
            return 2
    rows, verdicts, launched = [], [], 0
    for number, case in enumerate(CASES, 1):
        outcome = run_case(case, real_device=args.real_device)
        launched += outcome.launches
        v = verdict(case, outcome)
        verdicts.append(v)
        raised = outcome.raised or "nothing raised"
        note = f": {case.bug}; should raise {case.exc.__name__} containing “{case.message}”" if case.bug else ""
        rows.append(f"| {number} | `{case.api}` | {display(case.input)} | {ENVIRONMENTS[case.needs]} | {raised} | "
                    f"{display(outcome.message, code=True)} | {'YES' if outcome.launches else 'no'} | {v}{display(note, 400)} |")
    counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
    tally = ", ".join(f"{n} {v}{'s' if v == 'known defect' and n != 1 else ''}" for v, n in counts.items())
    reached = [c.id for c, row in zip(CASES, rows) if "| YES |" in row]
    launched_note = ("none does" if not reached else
                     f"only {', '.join(reached)}, a known defect, where the sentinel stopped it")
    apis = len({case.api for case in CASES})
    text = f"""# Hostile inputs

Every bad input below is one entry of `tests/support/hostile_cases.py`, tested by `tests/test_hostile_inputs.py`
and tabulated by `python -m tools.hostile_table` (this file is its output: do not edit by hand). {len(CASES)} inputs across {apis} entry points of the public API; all ran in one Python process,
which survived them all. "Launched" is whether anything reached `cuLaunchKernel`: each case runs with a
sentinel in its place, so an input that got past validation shows YES here ({launched_note}).

Environment: "as is" runs on the machine as it is (these inputs are refused before the driver is touched,
so a machine without a GPU raises the same error); "device" needs a device: a fake one on machines
without a GPU (`fake_driver.FakeDriver`: one sm_90 device, 64 MiB free, nothing compiled), the real one
with `--real-device` or in the `gpu`-marked test; "no driver" runs with a `cuda.bindings` whose every
driver call fails as it does where `libcuda` is missing.

Outcome: {tally}. A known defect names what pyrms should do
instead; its test is a strict expected failure until it is fixed.

| # | API | input | environment | exception | message | launched | outcome |
| --- | --- | --- | --- | --- | --- | --- | --- |
""" + "\n".join(rows) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    bad = [c.id for c, v in zip(CASES, verdicts) if v not in ("as specified", "known defect")]
    print(f"hostile_table: {len(CASES)} inputs across {apis} entry points: "
          f"{tally}; {launched} reached cuLaunchKernel; "
          f"process alive; wrote {args.out}" + (f"; NOT AS LISTED: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

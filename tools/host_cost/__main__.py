#!/usr/bin/env python3
"""Host cost per call of the benchmark's host-section variants on a machine without a GPU:

    python -m tools.host_cost [--rounds 41] [--number 500] [--only pyrms,bare] [--callgrind]

The variants are ``python -m pyrms.bench``'s host section's (pyrms.bench.host.host_variants: every op's
call on raw ints, its bare cuLaunchKernel calls and the extras; those needing PyTorch's CUDA are left out),
run over the real cuda-bindings and a stand-in ``libcuda.so.1`` (``standin_libcuda.c`` here, built with
``cc`` into a temporary folder and put first on ``LD_LIBRARY_PATH`` of a child process) whose every entry
point returns CUDA_SUCCESS at once. So the figures are pyrms's Python and the binding's argument
conversion, not the driver's work: a GPU host's bare launch costs several times the stand-in's.

Timing: ``timeit`` of ``--number`` calls per variant, the variants interleaved round by round, best of
``--rounds`` (many short rounds: on a shared machine most rounds lose the processor at some point).
``--callgrind``: instructions per call instead, deterministic (PYTHONHASHSEED=0), counted by valgrind's
callgrind over ``--number`` calls against ``2 * --number`` of each variant, in one process (the difference:
one-off costs cancel).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import timeit

HERE = pathlib.Path(__file__).parent
_CHILD = "_PYRMS_HOST_COST_CHILD"


def build_standin(folder: pathlib.Path) -> pathlib.Path:
    """The stand-in libcuda.so.1 compiled into ``folder``; returns the folder."""
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
                    str(HERE / "standin_libcuda.c")], check=True)
    return folder


def variants(only: list[str] | None) -> tuple[dict, list]:
    """The host section's variants on the stand-in device, by name (``only``: those names), and what keeps
    their buffers alive."""
    from pyrms import driver, dtypes
    from pyrms.bench import host, impls, ops, stats

    device = driver.get_device(0)
    tokens, hidden = host.HOST_SHAPE
    dt = dtypes.BFLOAT16
    keep = [driver.DeviceBuffer(stats.pad(tokens * hidden * dt.itemsize), device) for _ in range(5)]
    keep += [driver.DeviceBuffer(stats.pad(hidden * 4), device) for _ in range(3)]
    stream = driver.Stream(device)
    keep.append(stream)
    operands = ops.HostOperands(tokens, hidden, dt, device.ordinal, stream.handle, 1e-6, *(b.ptr for b in keep[:8]))
    ctx = impls.Context(stream=stream.handle, epsilon=1e-6, torch_reason="no CUDA torch on the stand-in driver")
    found, _, _ = host.host_variants(ctx, operands)
    return {name: fn for name, fn in found.items() if only is None or name in only}, keep


def time_variants(found: dict, rounds: int, number: int) -> dict[str, float]:
    """Best µs per call of each variant over ``rounds`` interleaved rounds of ``number`` calls."""
    timers = {name: timeit.Timer(fn) for name, fn in found.items()}
    best = {name: float("inf") for name in timers}
    for timer in timers.values():
        timer.timeit(number // 10 or 1)  # warm
    for _ in range(rounds):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(number) / number * 1e6)
    return best


def _child(args) -> None:
    only = args.only.split(",") if args.only else None
    found, keep = variants(only)
    if args.calls is not None:  # under callgrind: each variant ``calls`` then 2 * ``calls`` times, a dump before each
        import collections
        import itertools
        import math

        for fn in found.values():
            for _ in range(3):  # compiled, prepared, and a repeated call bound
                fn()
            for count in (args.calls, 2 * args.calls):
                math.fsum(())  # callgrind dumps its counts here (--dump-before=math_fsum)
                collections.deque(itertools.starmap(fn, itertools.repeat((), count)), maxlen=0)
        math.fsum(())
        print(json.dumps(list(found)))
        return
    print(json.dumps(time_variants(found, args.rounds, args.number)))
    del keep


def _callgrind(env, only: str | None, calls: int) -> dict[str, float]:
    """Instructions per call of each variant: callgrind collects inside collections.deque.extend only (the loops
    making the calls) and dumps its counts before each loop; (2 * calls' count - calls' count) / calls."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "cg.out"
        child = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                                "--toggle-collect=deque_extend*", "--dump-before=math_fsum", sys.executable, "-m",
                                "tools.host_cost", *(("--only", only) if only else ()), "--calls", str(calls)],
                               env=env, check=True, capture_output=True, text=True)
        names = json.loads(child.stdout.strip().splitlines()[-1])
        dumps = sorted(pathlib.Path(tmp).glob("cg.out.*"), key=lambda f: int(f.name.rsplit(".", 1)[1]))
        counts = [int(re.search(r"^(?:summary|totals): (\d+)", f.read_text(), re.M).group(1)) for f in dumps]
    # dump 1: up to the first loop; then each variant's two loops
    return {name: (counts[2 + 2 * i] - counts[1 + 2 * i]) / calls for i, name in enumerate(names)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=500)
    parser.add_argument("--only", default=None, help="comma-separated variant names")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--calls", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if os.environ.get(_CHILD):
        _child(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, _PYRMS_HOST_COST_CHILD="1", PYTHONHASHSEED="0",
                   LD_LIBRARY_PATH=os.pathsep.join(filter(None, (str(build_standin(pathlib.Path(tmp))),
                                                                os.environ.get("LD_LIBRARY_PATH")))))
        if args.callgrind:
            for name, per_call in _callgrind(env, args.only, args.number).items():
                print(f"{name:32s} {per_call:10.0f} instructions per call")
            return 0
        child = subprocess.run([sys.executable, "-m", "tools.host_cost", *(argv if argv is not None else sys.argv[1:])],
                               env=env, capture_output=True, text=True)
    if child.returncode:
        sys.stderr.write(child.stderr)
        return child.returncode
    found = json.loads(child.stdout.strip().splitlines()[-1])
    for name, us in found.items():
        own = name.removesuffix(" bound")  # as the benchmark's report: an op and its bound call vs its own bare calls
        bare = found.get(f"bare {own}", found.get("bare"))
        ratio = f"{us / bare:6.2f}x bare" if bare else ""
        print(f"{name:32s} {us:8.3f} us  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

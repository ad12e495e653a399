#!/usr/bin/env python3
"""Host time of the launch path with kernels loaded as libraries or as modules (needs a GPU to run):

    python -m tools.launch_loading_bench [--rounds 3] [--calls 2000] [--reps 15]

Times µs per call of prepared ``pyrms.rms_norm`` and ``pyrms.fused_add_rms_norm`` calls on raw
pointers of a 1 x 5120 bfloat16 layout, on the legacy default stream (0) and on a pyrms Stream, with
and without PDL, for each loading (``PYRMS_KERNEL_LOADING``: ``library``, cuLibraryLoadData, whose
CUkernel launches on an explicit stream without any context made current; ``module``,
cuModuleLoadData into the primary context, whose CUfunction launches after the per-thread context
check). Each loading runs in its own process (the loading is chosen when an image is first loaded),
the processes alternating ``--rounds`` times so that drift hits both alike; each figure is the
median over rounds of each round's median of ``--reps`` batches of ``--calls`` calls, and the spread
(max - min of the round medians) says what difference is noise. Nothing is checked: the GPU tests do
that.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

LOADINGS = ("library", "module")  # driver.LOADINGS, without importing pyrms for --help
HIDDEN = 5120


def _child(calls: int, reps: int) -> dict:
    """This process's figures: {"op stream pdl": median µs per call}."""
    import time

    import pyrms
    from pyrms import driver

    device = driver.set_device(0)
    nbytes = HIDDEN * 2
    x, y, r, w = (driver.DeviceBuffer(nbytes) for _ in range(4))
    for b in (x, y, r, w):
        driver.memset_d8(b.ptr, 0, nbytes)  # zeros: finite, and the values do not matter to the host path
    stream = driver.Stream()
    figures = {}
    for op in ("rms_norm", "fused_add_rms_norm"):
        for stream_name, handle in (("default", 0), ("stream", stream.handle)):
            for pdl in (True, False):
                if op == "rms_norm":
                    def call(h=handle, p=pdl):
                        pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-6, 1, HIDDEN, stream=h, pdl=p)
                else:
                    def call(h=handle, p=pdl):
                        pyrms.fused_add_rms_norm(x.ptr, r.ptr, w.ptr, 1e-6, 1, HIDDEN, stream=h, pdl=p)
                for _ in range(200):  # compiles, loads and prepares; warms the caches
                    call()
                device.synchronize()
                samples = []
                for _ in range(reps):
                    start = time.perf_counter()
                    for _ in range(calls):
                        call()
                    samples.append((time.perf_counter() - start) * 1e6 / calls)
                    device.synchronize()
                figures[f"{op} {stream_name} pdl={pdl}"] = statistics.median(samples)
    stream.close()
    for b in (x, y, r, w):
        b.close()
    return figures


def _run_child(loading: str, calls: int, reps: int) -> dict:
    env = dict(os.environ, PYRMS_KERNEL_LOADING=loading)
    command = [sys.executable, "-m", "tools.launch_loading_bench", "--child", "--calls", str(calls), "--reps", str(reps)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the {loading} run failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="processes per loading, alternating (default 3)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch (default 2000)")
    parser.add_argument("--reps", type=int, default=15, help="timed batches per figure and process (default 15)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one process's figures, as JSON
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.calls, args.reps)))
        return 0
    rounds = {loading: [] for loading in LOADINGS}
    for _ in range(args.rounds):
        for loading in LOADINGS:
            rounds[loading].append(_run_child(loading, args.calls, args.reps))
    keys = list(rounds[LOADINGS[0]][0])
    print(f"host µs per call, median of {args.rounds} processes per loading (each the median of {args.reps} x "
          f"{args.calls} calls); spread = max - min over the processes")
    print(f"{'call':38} {'library':>9} {'spread':>7} {'module':>9} {'spread':>7} {'lib-mod':>8}")
    for key in keys:
        cells = []
        for loading in LOADINGS:
            values = [figures[key] for figures in rounds[loading]]
            cells.append((statistics.median(values), max(values) - min(values)))
        (lib, lib_spread), (mod, mod_spread) = cells
        print(f"{key:38} {lib:9.3f} {lib_spread:7.3f} {mod:9.3f} {mod_spread:7.3f} {lib - mod:+8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Sweep the rms_norm kernel's launch shape (threads per block x register-cached vectors).

For each (tokens, hidden) shape, every valid (block, cache) pair is validated bit for bit on
its first rows against the twin, then timed with CUDA events over rotated buffers (working set
above twice the L2). Prints GB/s and the fraction of the device-to-device copy ceiling, and
writes JSON with --json. Used to choose pyrms.plan's table; needs a GPU.

    python tools/tune_rms_norm.py --shapes 16384x5120,4096x16384 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from pyrms import driver, dtypes, kernels, plan, reference  # noqa: E402
from pyrms.ops.rms_norm import _SIGNATURE  # noqa: E402


def time_ms(launch, sets: int, reps: int, batch: int = 10) -> float:
    """Median device time per launch, each sample a batch of back-to-back launches between two
    events (steady state, as in a model; one launch alone would add the idle GPU's start-up)."""
    start, stop = driver.Event(), driver.Event()
    for i in range(3):
        launch(i % sets)
    samples = []
    for i in range(reps):
        start.record()
        for j in range(batch):
            launch((i * batch + j) % sets)
        stop.record()
        stop.synchronize()
        samples.append(stop.elapsed_ms(start) / batch)
    return float(np.median(samples))


def copy_ceiling_gbs(nbytes: int = 2**31) -> float:
    with driver.DeviceBuffer(nbytes) as a, driver.DeviceBuffer(nbytes) as b:
        ms = time_ms(lambda i: driver.memcpy_dtod(b.ptr, a.ptr, nbytes, stream=0), 1, 5, batch=4)
    return 2 * nbytes / ms / 1e6


def configs(dt, hidden):
    vectors = -(-hidden // dt.vec_elems)
    # Powers of two, and the blocks that give each thread 2 to 8 vectors.
    per_thread = {-(-vectors // v) for v in (2, 3, 4, 5, 6, 8)}
    blocks = sorted({32, 64, 128, 256, 512, 1024} | {min(1024, max(32, (n + 31) // 32 * 32)) for n in per_thread})
    for cache in (0, *plan.CACHE_CHOICES):
        for block in blocks:
            if block > plan.max_threads(cache) or (cache and block * cache < vectors) or block > 32 * vectors:
                continue
            yield block, cache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16384x5120,32768x8192,4096x16384,4096x5120,4096x8192,1024x4096,16384x1024")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--configs", help="only these block/cache pairs, e.g. 128/0,256/4 (default: all valid)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dt = dtypes.get(args.dtype)
    device = driver.current_device()
    ceiling = copy_ceiling_gbs()
    print(f"{device.name}: copy ceiling {ceiling:.0f} GB/s (read + write)")
    results = []
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        tokens, hidden = map(int, shape.split("x"))
        nbytes = 2 * tokens * hidden * dt.itemsize + hidden * dt.itemsize
        sets = max(1, -(-2 * device.l2_cache_bytes // nbytes))
        x = rng.uniform(-2, 2, (tokens, hidden)).astype(dt.numpy)
        w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
        xs = [driver.DeviceBuffer(x.nbytes) for _ in range(sets)]
        ys = [driver.DeviceBuffer(x.nbytes) for _ in range(sets)]
        wb = driver.DeviceBuffer(w.nbytes)
        for b in xs:
            driver.memcpy_htod(b.ptr, x)
        driver.memcpy_htod(wb.ptr, w)
        line = []
        wanted = None if not args.configs else {tuple(map(int, c.split("/"))) for c in args.configs.split(",")}
        for block, cache in configs(dt, hidden):
            if wanted is not None and (block, cache) not in wanted:
                continue
            expr = plan.kernel_expression(dt, cache, False, False)
            kernel = kernels.get(plan.RmsNormPlan.source, expr, plan.variant_group(dt, False, False), _SIGNATURE, device)

            def launch(i, kernel=kernel, block=block):
                kernel.launch(tokens, block, (ys[i].ptr, xs[i].ptr, wb.ptr, 1e-6, hidden, hidden, hidden), 0)

            launch(0)
            got = np.empty((min(tokens, 4), hidden), dtype=dt.numpy)
            driver.memcpy_dtoh(got, ys[0].ptr)
            want = reference.rms_norm_twin(x[: got.shape[0]], w, 1e-6, block=block)
            if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                line.append(f"{block}/{cache}=WRONG")
                continue
            ms = time_ms(launch, sets, args.reps)
            gbs = nbytes / ms / 1e6
            results.append(dict(tokens=tokens, hidden=hidden, dtype=dt.name, block=block, cache=cache,
                                us=ms * 1e3, gbs=gbs, ceiling_fraction=gbs / ceiling))
            line.append(f"{block}/{cache}={gbs / ceiling:.2f}")
        mine = [r for r in results if r["tokens"] == tokens and r["hidden"] == hidden]
        if not mine:
            print(f"{shape}: no valid configuration " + " ".join(line))
            continue
        best = max(mine, key=lambda r: r["gbs"])
        print(f"{shape}: best {best['block']}/{best['cache']} {best['us']:.1f} us {best['ceiling_fraction']:.2f} | "
              + " ".join(line), flush=True)
        for b in (*xs, *ys, wb):
            b.close()
    if args.json:
        args.json.write_text(json.dumps(dict(device=device.name, ceiling_gbs=ceiling, results=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

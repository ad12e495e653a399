#!/usr/bin/env python3
"""Sweep the rms_norm kernel's launch shape (threads per block x register-cached vectors).

For each (tokens, hidden) shape, every valid (block, cache) pair is validated bit for bit on
its first rows against the twin, then timed like the benchmark (pyrms.bench.timing: CUDA events
around batches queued behind a spin kernel, so small shapes show device time, not host time)
over rotated buffers (working set above twice the L2). Prints GB/s and the fraction of the
device-to-device copy ceiling, and writes JSON with --json. With --early, each register-cached
configuration is also timed in its EARLY_WEIGHTS variant (labelled like 160/4e). Used to choose
pyrms.plan's table; needs a GPU.

    python tools/tune_rms_norm.py --shapes 16384x5120,4096x16384 --json out.json
    python tools/tune_rms_norm.py --shapes 1x5120 --configs 160/4,160/4e,640/1
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from pyrms import driver, dtypes, kernels, plan, reference  # noqa: E402
from pyrms.bench import ceiling, timing  # noqa: E402
from pyrms.ops.rms_norm import _SIGNATURE  # noqa: E402


def configs(dt, hidden, early: bool):
    """(block, cache, early_weights) triples worth timing for a row of `hidden` elements."""
    vectors = -(-hidden // dt.vec_elems)
    # Powers of two, and the blocks that give each thread 2 to 8 vectors.
    per_thread = {-(-vectors // v) for v in (2, 3, 4, 5, 6, 8)}
    blocks = sorted({32, 64, 128, 256, 512, 1024} | {min(1024, max(32, (n + 31) // 32 * 32)) for n in per_thread})
    for cache in (0, *plan.CACHE_CHOICES):
        for block in blocks:
            if block > plan.max_threads(cache) or (cache and block * cache < vectors) or block > 32 * vectors:
                continue
            yield block, cache, False
            if early and cache:
                yield block, cache, True


def label(block: int, cache: int, early: bool) -> str:
    return f"{block}/{cache}{'e' if early else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16384x5120,32768x8192,4096x16384,4096x5120,4096x8192,1024x4096,16384x1024")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16", help="default bfloat16 (or bf16, fp16, ...)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--configs", help="only these block/cache pairs, e.g. 128/0,256/4,256/4e (default: all valid)")
    parser.add_argument("--early", action="store_true", help="also time the EARLY_WEIGHTS variant of each cached pair")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dt = args.dtype
    device = driver.current_device()
    timer = timing.EventTimer(device, 0)  # the kernels below launch on the legacy default stream
    ceiling_gbs = ceiling.measure(timer, device, 1024, 5, "tune").gbps
    print(f"{device.name}: copy ceiling {ceiling_gbs:.0f} GB/s (read + write)")
    results = []
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        tokens, hidden = map(int, shape.split("x"))
        nbytes = 2 * tokens * hidden * dt.itemsize + hidden * dt.itemsize
        sets = max(1, -(-2 * device.l2_cache_bytes // nbytes))
        x = rng.uniform(-2, 2, (tokens, hidden)).astype(dt.numpy)
        w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
        # One pool per operand, `sets` copies 256-byte aligned: thousands of sets at 1 token.
        step = -(-x.nbytes // 256) * 256
        x_pool, y_pool = driver.DeviceBuffer(sets * step), driver.DeviceBuffer(sets * step)
        xs, ys = [x_pool.ptr + i * step for i in range(sets)], [y_pool.ptr + i * step for i in range(sets)]
        wb = driver.DeviceBuffer(w.nbytes)
        for ptr in xs:
            driver.memcpy_htod(ptr, x)
        driver.memcpy_htod(wb.ptr, w)
        line = []
        wanted = None if not args.configs else set(args.configs.split(","))
        for block, cache, early in configs(dt, hidden, args.early or any("e" in w for w in wanted or ())):
            name = label(block, cache, early)
            if wanted is not None and name not in wanted:
                continue
            expr = plan.kernel_expression(dt, cache, False, False, early)
            kernel = kernels.get(plan.RmsNormPlan.source, expr, plan.variant_group(dt, False, False), _SIGNATURE, device)

            def launch(i, kernel=kernel, block=block):
                kernel.launch(tokens, block, (ys[i], xs[i], wb.ptr, 1e-6, hidden, hidden, hidden), 0)

            launch(0)
            got = np.empty((min(tokens, 4), hidden), dtype=dt.numpy)
            driver.memcpy_dtoh(got, ys[0])
            want = reference.rms_norm_twin(x[: got.shape[0]], w, 1e-6, block=block)
            if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                line.append(f"{name}=WRONG")
                continue
            us = timing.median_us(timer, launch, sets, args.reps)
            gbs = nbytes / us / 1e3
            results.append(dict(tokens=tokens, hidden=hidden, dtype=dt.name, block=block, cache=cache, early_weights=early,
                                us=us, gbs=gbs, ceiling_fraction=gbs / ceiling_gbs))
            line.append(f"{name}={gbs / ceiling_gbs:.2f}/{us:.2f}us")
        mine = [r for r in results if r["tokens"] == tokens and r["hidden"] == hidden]
        if not mine:
            print(f"{shape}: no valid configuration " + " ".join(line))
            continue
        best = max(mine, key=lambda r: r["gbs"])
        print(f"{shape}: best {label(best['block'], best['cache'], best['early_weights'])} {best['us']:.2f} us "
              f"{best['ceiling_fraction']:.2f} | "
              + " ".join(line), flush=True)
        for b in (x_pool, y_pool, wb):
            b.close()
    timer.close()
    if args.json:
        args.json.write_text(json.dumps(dict(device=device.name, ceiling_gbs=ceiling_gbs, results=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

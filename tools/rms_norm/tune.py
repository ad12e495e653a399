#!/usr/bin/env python3
"""Sweep the rms_norm kernel's launch shape (fold width x register-cached vectors x spread).

For each (tokens, hidden) shape, every valid configuration is validated bit for bit on its first rows
against the twin, then timed like the benchmark (pyrms.bench.timing: CUDA events around batches queued
behind a spin kernel, so small shapes show device time, not host time) over rotated buffers (working
set above twice the L2). Prints GB/s and the fraction of the device-to-device copy ceiling, and writes
JSON with --json. A configuration is FOLD/CACHE for the many-row kernel, and FOLD/CACHExSPREADe for a
few-row one (SPREAD * FOLD threads, weights loaded early; SPREAD 1 is written x1e; a suffix a for the
all-body ALIGNED variant, which the aligned test buffers allow), as compiled (plan.FEW_ROW_SHAPES). --pdl launches with programmatic dependent launch. Used to choose the row plan's
table; needs a GPU.

    python -m tools.rms_norm.tune --shapes 16384x5120,4096x16384 --json out.json
    python -m tools.rms_norm.tune --shapes 1x5120 --configs 160/4,160/4x4e,160/4x2e --pdl
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from pyrms import driver, dtypes, launch

from pyrms.ops import _row_plan as plan
from pyrms.bench import ceiling, timing
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin


def configs(dt, hidden):
    """(fold, cache, spread, early_weights) worth timing for a row of `hidden` elements."""
    vectors = -(-hidden // dt.vec_elems)
    # Powers of two, and the blocks that give each thread 2 to 8 vectors.
    per_thread = {-(-vectors // v) for v in (2, 3, 4, 5, 6, 8)}
    blocks = sorted({32, 64, 128, 256, 512, 1024} | {min(1024, max(32, (n + 31) // 32 * 32)) for n in per_thread})
    shapes = [(c, 1, False, False) for c in (0, *plan.CACHE_CHOICES)]
    shapes += [(c, s, True, aligned) for c, s in plan.FEW_ROW_SHAPES for aligned in (False, True)]
    for cache, spread, early, aligned in shapes:
        for block in blocks:
            if spread * block > plan.MAX_BLOCK or spread * block > plan.max_threads(cache // spread):
                continue
            if (cache and block * cache < vectors) or block > 32 * vectors:
                continue
            if aligned and hidden % dt.vec_elems:
                continue
            yield block, cache, spread, early, aligned


def label(block: int, cache: int, spread: int, early: bool, aligned: bool) -> str:
    return f"{block}/{cache}" + (f"x{spread}e" if early else "") + ("a" if aligned else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16384x5120,32768x8192,4096x16384,4096x5120,4096x8192,1024x4096,16384x1024")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16", help="default bfloat16 (or bf16, fp16, ...)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--configs", help="only these, e.g. 128/0,256/4,256/4x4e (default: all valid)")
    parser.add_argument("--pdl", action="store_true", help="launch with programmatic dependent launch")
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
        for block, cache, spread, early, aligned in configs(dt, hidden):
            name = label(block, cache, spread, early, aligned)
            if wanted is not None and name not in wanted:
                continue
            expr = rms_plan.kernel_expression(dt, cache, spread, False, False, early, aligned)
            kernel = launch.get_kernel(rms_plan.RmsNormPlan.source, expr, rms_plan.variant_group(dt, False, False),
                                 rms_plan.RmsNormPlan(dt, 0, 0, 0).signature, device)

            def run(i, kernel=kernel, threads=spread * block):
                kernel.launch(tokens, threads, (ys[i], xs[i], wb.ptr, 0, 1e-6, hidden, hidden, hidden), 0, pdl=args.pdl)

            run(0)
            got = np.empty((min(tokens, 4), hidden), dtype=dt.numpy)
            driver.memcpy_dtoh(got, ys[0])
            want = rms_twin.rms_norm_twin(x[: got.shape[0]], w, 1e-6, block=block)
            if not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
                line.append(f"{name}=WRONG")
                continue
            us = timing.median_us(timer, run, sets, args.reps)
            gbs = nbytes / us / 1e3
            results.append(dict(tokens=tokens, hidden=hidden, dtype=dt.name, block=block, cache=cache, spread=spread,
                                early_weights=early, aligned=aligned, pdl=args.pdl, us=us, gbs=gbs, ceiling_fraction=gbs / ceiling_gbs))
            line.append(f"{name}={gbs / ceiling_gbs:.2f}/{us:.2f}us")
        mine = [r for r in results if r["tokens"] == tokens and r["hidden"] == hidden]
        if not mine:
            print(f"{shape}: no valid configuration " + " ".join(line))
            continue
        best = max(mine, key=lambda r: r["gbs"])
        print(f"{shape}: best {label(best['block'], best['cache'], best['spread'], best['early_weights'], best['aligned'])} {best['us']:.2f} us "
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

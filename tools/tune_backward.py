#!/usr/bin/env python3
"""Sweep rms_norm_backward's launch shape (threads per block x cached vectors x rows per block).

Each configuration is checked against the float64 reference, then timed like the benchmark
(pyrms.bench.timing: CUDA events around batches queued behind a spin kernel) on rotated inputs. Needs a GPU. Used to choose pyrms.plan's backward table.

    python tools/tune_backward.py --shape 16384x5120

Every configuration computes the statistics in the forward's tree (NormBackwardPlan.stats_fold).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import pyrms  # noqa: E402
from pyrms import driver, dtypes, plan, reference  # noqa: E402
from pyrms.bench import timing  # noqa: E402
from pyrms.ops import _backward  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="16384x5120")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16", help="default bfloat16 (or bf16, fp16, ...)")
    parser.add_argument("--configs", default="320/2/16,640/1/16,640/1/64,1024/0/16,512/0/16,256/0/16,320/2/64")
    args = parser.parse_args()
    tokens, hidden = map(int, args.shape.split("x"))
    dt = args.dtype
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (tokens, hidden)).astype(dt.numpy)
    dy = rng.uniform(-1, 1, (tokens, hidden)).astype(dt.numpy)
    w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
    sets = 3
    xs = [pyrms.Tensor.from_numpy(x) for _ in range(sets)]
    dys = [pyrms.Tensor.from_numpy(dy) for _ in range(sets)]
    dxs = [pyrms.Tensor.empty((tokens, hidden), dt) for _ in range(sets)]
    dw = pyrms.Tensor.empty((hidden,), dt)
    wt = pyrms.Tensor.from_numpy(w)
    ref_dx = reference.rms_norm_backward_ref(dy[:64], x[:64], w, 1e-6)[0]
    nbytes = (3 * tokens * hidden + 2 * hidden) * dt.itemsize
    original = plan.plan_norm_backward
    timer = timing.EventTimer(driver.current_device(), 0)  # the op launches on the legacy default stream
    for config in args.configs.split(","):
        block, vectors, rows_per_block = map(int, config.split("/"))
        plan.plan_norm_backward = lambda d, h, **kw: plan.NormBackwardPlan(
            dtypes.get(d), h, block, vectors, False, bool(kw.get("gemma")), dtypes.get(kw.get("grad_dtype") or d))
        _backward._prepared.items.clear()  # prepared launches hold the plan they were made with

        def launch(i):
            pyrms.rms_norm_backward(dxs[i], dw, dys[i], xs[i], wt, 1e-6, tokens, hidden, rows_per_block=rows_per_block)

        try:
            launch(0)
            driver.synchronize()
        except Exception as exc:  # an invalid shape for this kernel: report and go on
            print(f"{config}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        got = dxs[0].to_numpy()[:64].astype(np.float64)
        err = np.linalg.norm(got - ref_dx) / np.linalg.norm(ref_dx)
        us = timing.median_us(timer, launch, sets, 8, batch=6)
        print(f"{config}: {us:.1f} us, {nbytes / us / 1e3:.0f} GB/s, dx rel err {err:.2e}", flush=True)
    plan.plan_norm_backward = original
    _backward._prepared.items.clear()
    timer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

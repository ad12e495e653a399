#!/usr/bin/env python3
"""Sweep the norm backward's launch shape (threads per block x cached vectors V x rows per block) per shape.

RMSNorm's backward, or LayerNorm's with --layer-norm (the same plan and kernels, centered: the mean subtracted);
with --saved, reading the statistics the forward saved (RMSNorm's rstd, LayerNorm's mean and rstd), as eager
autograd's backward does, instead of recomputing them.

Each configuration is checked against the float64 reference, then timed like the benchmark
(pyrms.bench.timing: CUDA events around batches queued behind a spin kernel) on rotated inputs. Needs a
GPU. Used to choose the backward plan's table (backward_block, BACKWARD_FEW_ROWS).

    python -m tools.norm_backward.tune --shapes 16384x5120,32x5120 --configs planned,128/0/16,128/0/1,160/0/1

A config is `planned`, `legacy` (the plan without its staged kernel), sTxS/rows_per_block[hH][cC][f] (the staged
kernel with T threads and S row buffers, e.g. s256x2/16; hH: its column sums held in registers, H vectors a
thread, h0 in shared memory; by default where the planner would hold them at T threads; cC: chunks of C rows
instead of the plan's, which changes the parameter gradients' order, not dx (rows_per_block a multiple of C, or
0 for C); f: S stages whatever the grid, where NormBackwardPlan.staged_launch would deepen a grid of few blocks per
multiprocessor) or
block/V/rows_per_block
(rows_per_block 0: the planned one for the shape);
shapes a plan refuses are reported and skipped. Every configuration computes the statistics in the
forward's tree (NormBackwardPlan.stats_fold); the sums of x_hat * g follow the block, so dx's bits may
differ between blocks, never dweight's order.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys

import numpy as np

import pyrms
from pyrms import driver, dtypes
from pyrms.bench import timing
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import prepared as _backward
from pyrms.ops._norm_backward import twin as bwd_twin
from pyrms.ops._row_twin import row_stats_twin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16384x5120")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16", help="default bfloat16 (or bf16, fp16, ...)")
    parser.add_argument("--layer-norm", dest="centered", action="store_true",
                        help="LayerNorm's backward (centered) instead of RMSNorm's")
    parser.add_argument("--saved", action="store_true",
                        help="read the forward's saved statistics (made once per input at setup), not recomputing them")
    parser.add_argument("--configs", default="planned,128/0/16,128/0/1,160/0/1,256/0/1,160/4/16")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the device-to-device copy ceiling")
    args = parser.parse_args()
    dt, ln = args.dtype, args.centered
    original = bwd_plan.plan_norm_backward
    device = driver.current_device()
    timer = timing.EventTimer(device, 0)  # the op launches on the legacy default stream
    op = "LayerNorm's backward" if ln else "RMSNorm's backward"
    ceiling_gbps = None
    if not args.no_ceiling:
        from pyrms.bench import ceiling
        ceiling_gbps = ceiling.measure(timer, device, 1024, 10, "copy").gbps
        print(f"copy ceiling: {ceiling_gbps:.0f} GB/s", flush=True)
    try:
        for shape in args.shapes.split(","):
            tokens, hidden = map(int, shape.split("x"))
            rng = np.random.default_rng(0)
            x = rng.uniform(-2, 2, (tokens, hidden)).astype(dt.numpy)
            dy = rng.uniform(-1, 1, (tokens, hidden)).astype(dt.numpy)
            w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
            sets = max(3, min(64, (256 << 20) // (3 * tokens * hidden * dt.itemsize)))  # rotate past the L2
            xs = [pyrms.Tensor.from_numpy(x) for _ in range(sets)]
            dys = [pyrms.Tensor.from_numpy(dy) for _ in range(sets)]
            dxs = [pyrms.Tensor.empty((tokens, hidden), dt) for _ in range(sets)]
            dw, db = pyrms.Tensor.empty((hidden,), dt), pyrms.Tensor.empty((hidden,), dt)
            wt = pyrms.Tensor.from_numpy(w)
            stats = saved_statistics(x, ln, dt, original(dt, hidden, centered=ln).stats_fold) if args.saved else {}
            check = min(tokens, 64)
            dx_ref = bwd_twin.norm_backward_ref(dy[:check], x[:check], w, 1e-6, centered=ln)[0]
            # the rows, the weight and the parameter gradients, and the saved statistics (float32 per row) read
            nbytes = (3 * tokens * hidden + (3 if ln else 2) * hidden) * dt.itemsize + 4 * tokens * len(stats)
            saved = " from saved statistics" if args.saved else ""
            print(f"{op}{saved} {dt.name} {tokens}x{hidden}: planned {original(dt, hidden, centered=ln)}", flush=True)
            for config in args.configs.split(","):
                rows_per_block = None
                if config == "planned":
                    bwd_plan.plan_norm_backward = original
                elif config == "legacy" or config.startswith("s"):
                    planned = original(dt, hidden, centered=ln)
                    if config == "legacy":
                        forced = dataclasses.replace(planned, threads=0, stages=0)
                    else:
                        head, tail = config[1:].split("/")
                        parts = re.fullmatch(r"(\d+)(?:h(\d+))?(?:c(\d+))?(f?)", tail)
                        if parts is None:
                            print(f"  {config}: skipped: not sTxS/rows_per_block[hH][cC][f]")
                            continue
                        rows_part, held_part, chunk_part, fixed = parts.groups()
                        threads, stages = map(int, head.split("x"))
                        chunk_rows = int(chunk_part) if chunk_part else None  # None: by the row count
                        rows_per_block = int(rows_part) or chunk_rows
                        try:
                            forced = dataclasses.replace(planned.staged_shape(threads, stages, int(held_part) if held_part else None),
                                                         deepen=not fixed, chunk_rows=chunk_rows)
                        except ValueError as exc:
                            print(f"  {config}: skipped: {exc}")
                            continue
                        if not planned.stages or forced.staged_shared_bytes(
                                forced.staged_slots(rows_per_block or forced.chunk_for(tokens))) > bwd_plan.STAGED_SHARED_LIMIT:
                            print(f"  {config}: skipped: no staged kernel, or its stages do not fit")
                            continue
                    bwd_plan.plan_norm_backward = lambda d, h, _forced=forced, **kw: _forced
                else:
                    block, held, rows_per_block = map(int, config.split("/"))
                    rows_per_block = rows_per_block or None
                    try:
                        forced = bwd_plan.NormBackwardPlan(dt, hidden, block, held, ln, False, dt)
                    except ValueError as exc:
                        print(f"  {config}: skipped: {exc}")
                        continue
                    bwd_plan.plan_norm_backward = lambda d, h, _forced=forced, **kw: _forced
                _backward._prepared.forget(device)  # prepared launches hold the plan they were made with

                def launch(i, rows_per_block=rows_per_block):  # the ops' call with their defaults
                    _backward.norm_backward(
                        centered=ln, grad_input=dxs[i], grad_weight=dw, grad_bias=db if ln else None,
                        grad_output=dys[i], input=xs[i], weight=wt, epsilon=1e-6, num_tokens=tokens, hidden_size=hidden,
                        dtype=None, grad_output_stride=None, input_stride=None, grad_input_stride=None, gemma=False,
                        grad_weight_dtype=None, workspace=None, rows_per_block=rows_per_block, stream=None, pdl=True,
                        **stats)

                launch(0)
                driver.synchronize()
                got = dxs[0].to_numpy()[:check].astype(np.float64)
                err = np.linalg.norm(got - dx_ref) / np.linalg.norm(dx_ref)
                us = timing.median_us(timer, launch, sets, 8, batch=6)
                frac = f", {nbytes / us / 1e3 / ceiling_gbps:.2f} of the ceiling" if ceiling_gbps else ""
                print(f"  {config}: {us:.2f} us, {nbytes / us / 1e3:.0f} GB/s{frac}, dx rel err {err:.2e}", flush=True)
            for buffers in (xs, dys, dxs, stats.values()):
                for b in buffers:
                    b.close()
    finally:
        bwd_plan.plan_norm_backward = original
        _backward._prepared.forget(device)
        timer.close()
    return 0


def saved_statistics(x: np.ndarray, centered: bool, dt, fold: int) -> dict:
    """The statistics the forward of x saves for the backward (LayerNorm's mean and rstd, RMSNorm's rstd), by the
    backward's keyword, as new float32 Tensors (the caller's to close): the row core twin's, which are the
    forward's bit for bit (its GPU tests), for 16-byte aligned rows in the forward's fold (the plan's stats_fold)."""
    mean, rstd = row_stats_twin(x.astype(np.float32), 1e-6, fold, 0, dt.vec_elems, centered=centered)
    return {name: pyrms.Tensor.from_numpy(values) for name, values in (("mean", mean), ("rstd", rstd))
            if centered or name == "rstd"}

if __name__ == "__main__":
    sys.exit(main())

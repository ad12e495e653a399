#!/usr/bin/env python3
"""The seed 003's RMSNorm-vs-LayerNorm table, measured for pyrms on this GPU.

Forward and backward (dx with dweight, and dbias for LayerNorm) of both norms at one hidden size,
for several token counts and dtypes. Device time per launch comes from CUDA graph replays of 20
launches (so host time does not count), inputs rotated so the working set exceeds the L2.
Prints a markdown table and writes it with --out. Needs a GPU.

    python -m tools.layer_norm.norm_table --hidden 4096 --tokens 1,32,1024,4096,16384,32768 --dtypes float16,bfloat16
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import pyrms
from pyrms import driver, dtypes

LAUNCHES = 20


def device_us(stream, launch, sets: int) -> float:
    """Median device time per launch over graph replays of LAUNCHES launches on rotated sets."""
    with driver.capture(stream) as graph:
        for i in range(LAUNCHES):
            launch(i % sets)
    start, stop = driver.Event(), driver.Event()
    graph.launch(stream)
    samples = []
    for _ in range(7):
        start.record(stream)
        graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
        samples.append(stop.elapsed_ms(start) * 1e3 / LAUNCHES)
    graph.close()
    return float(np.median(samples))


def measure(dt, tokens: int, hidden: int, l2_bytes: int, stream) -> dict[str, float]:
    rng = np.random.default_rng(tokens)
    per_set = 4 * tokens * hidden * dt.itemsize
    sets = max(2, min(8, -(-2 * l2_bytes // per_set)))
    host = lambda shape: rng.uniform(-2, 2, shape).astype(dt.numpy)  # noqa: E731
    x, dy = host((tokens, hidden)), host((tokens, hidden))  # the same values in every set: only addresses rotate
    xs = [pyrms.Tensor.from_numpy(x) for _ in range(sets)]
    dys = [pyrms.Tensor.from_numpy(dy) for _ in range(sets)]
    outs = [pyrms.Tensor.empty((tokens, hidden), dt) for _ in range(sets)]
    w, b = pyrms.Tensor.from_numpy(host(hidden)), pyrms.Tensor.from_numpy(host(hidden))
    dw, db = pyrms.Tensor.empty((hidden,), dt), pyrms.Tensor.empty((hidden,), dt)
    ws_bytes = max(pyrms.backward_workspace_bytes(tokens, hidden, layer_norm=ln) for ln in (False, True))
    workspace = pyrms.Tensor.empty((ws_bytes // 4,), "float32")  # graph capture needs a caller-owned workspace
    eps = 1e-5
    ops = {
        "rms_fwd": lambda i: pyrms.rms_norm(outs[i], xs[i], w, eps, tokens, hidden, stream=stream),
        "ln_fwd": lambda i: pyrms.layer_norm(outs[i], xs[i], w, b, eps, tokens, hidden, stream=stream),
        "rms_bwd": lambda i: pyrms.rms_norm_backward(outs[i], dw, dys[i], xs[i], w, eps, tokens, hidden,
                                                     workspace=workspace, stream=stream),
        "ln_bwd": lambda i: pyrms.layer_norm_backward(outs[i], dw, db, dys[i], xs[i], w, eps, tokens, hidden,
                                                      workspace=workspace, stream=stream),
    }
    for op in ops.values():  # compile and load outside the capture
        op(0)
    stream.synchronize()
    result = {name: device_us(stream, op, sets) for name, op in ops.items()}
    for t in (*xs, *dys, *outs, w, b, dw, db, workspace):
        t.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--tokens", default="1,32,1024,4096,16384,32768")
    parser.add_argument("--dtypes", type=dtypes.argument_list, default="float16,bfloat16",
                        help="comma list, default float16,bfloat16 (aliases such as fp16, bf16 accepted)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = driver.current_device()
    lines = [f"pyrms on {device.name}, hidden {args.hidden}: device time per launch (us), CUDA graph replays",
             "", "| dtype | tokens | RMSNorm fwd | LayerNorm fwd | LN/RMS fwd | RMSNorm bwd | LayerNorm bwd | LN/RMS bwd |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    with driver.Stream() as stream:
        for dt in args.dtypes:
            for tokens in map(int, args.tokens.split(",")):
                r = measure(dt, tokens, args.hidden, device.l2_cache_bytes, stream)
                lines.append(f"| {dt.name} | {tokens} | {r['rms_fwd']:.1f} | {r['ln_fwd']:.1f} | "
                             f"{r['ln_fwd'] / r['rms_fwd']:.2f} | {r['rms_bwd']:.1f} | {r['ln_bwd']:.1f} | "
                             f"{r['ln_bwd'] / r['rms_bwd']:.2f} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Host time per call of pyrms.torch.rms_norm on torch tensors, against F.rms_norm (issue 11's target:
at most 1.0x) and against what lies under it: pyrms.rms_norm on the same raw pointers, and a bare
cuLaunchKernel of the very launch pyrms makes.

Method as pyrms/bench/host.py's: calls in batches of BATCH on one small bf16 shape, each batch started
on an idle device (synchronized outside the timed region) so that the queue never pushes back; µs per
call is the batch's perf_counter time / BATCH; median over batches, the variants interleaved batch by
batch. pyrms.torch is timed under torch.no_grad() with an nn.Parameter weight, as a model runs it.

    PYTHONPATH=. python3 tools/torch_host_time.py [--shape 1x4096] [--batches 200]

Needs a GPU, PyTorch with CUDA. Prints one line per variant, then the ratio to F.rms_norm.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pyrms  # noqa: E402
import pyrms.torch  # noqa: E402
from pyrms.bench.host import bare_launcher, recorded_launches  # noqa: E402

BATCH = 200


def time_variants(variants: dict, batches: int) -> dict[str, float]:
    samples = {name: [] for name in variants}
    gc.disable()
    try:
        for _ in range(batches):
            for name, fn in variants.items():
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(BATCH):
                    fn()
                samples[name].append((time.perf_counter() - start) * 1e6 / BATCH)
        torch.cuda.synchronize()
    finally:
        gc.enable()
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description="Host time per call of pyrms.torch.rms_norm against F.rms_norm.")
    parser.add_argument("--shape", default="1x4096", help="TOKENSxHIDDEN (default 1x4096)")
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    tokens, hidden = (int(v) for v in args.shape.split("x"))
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    weight = torch.nn.Parameter(torch.rand(hidden, device="cuda", dtype=torch.bfloat16))
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream
    pointers = out.data_ptr(), x.data_ptr(), weight.data_ptr()

    def raw():
        pyrms.rms_norm(*pointers, 1e-6, tokens, hidden, dtype="bfloat16", stream=stream)

    raw()  # compiles and loads, not timed
    with recorded_launches() as calls:
        raw()
    variants = {"bare cuLaunchKernel": bare_launcher(calls[0]) if len(calls) == 1 else None,
                "pyrms.rms_norm (raw ints)": raw,
                "pyrms.torch.rms_norm": lambda: pyrms.torch.rms_norm(x, weight, 1e-6),
                "F.rms_norm": lambda: F.rms_norm(x, (hidden,), weight, 1e-6)}
    variants = {name: fn for name, fn in variants.items() if fn is not None}
    with torch.no_grad():
        time_variants(variants, 5)  # warm-up
        per_call = time_variants(variants, args.batches)
    print(f"host µs per call, {tokens}x{hidden} bf16, median of {args.batches} batches of {BATCH}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, us in per_call.items():
        print(f"  {us:7.2f}  {name}")
    ratio = per_call["pyrms.torch.rms_norm"] / per_call["F.rms_norm"]
    print(f"pyrms.torch.rms_norm / F.rms_norm = {ratio:.2f} (target <= 1.0: {'met' if ratio <= 1.0 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

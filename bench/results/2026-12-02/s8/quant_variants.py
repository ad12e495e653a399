"""Throwaway experiment (run 45): what the quantizing step's per-element work costs, at 16384 x 5120 bf16 ->
float8_e4m3fn (round_input, as tools/bench_quant): each mode of rms_norm_quant (per group: groups of 128, fp32 and
ue8m0 scales) and fused static, device µs per call by pyrms.bench.timing.median_us (the median of three medians
of REPS samples). Run in the tree and in make_quant_variants.py's copies of it; prints one line per case.

    PYTHONPATH=. python3 bench/results/2026-12-02/s8/quant_variants.py LABEL
"""
import sys

import torch

import pyrms
from pyrms import driver
from pyrms.bench import timing

EPS, T, HIDDEN, REPS, SETS = 1e-6, 16384, 5120, 9, 3
label = sys.argv[1]
device = driver.selected_device()
timer = timing.EventTimer(device, torch.cuda.current_stream().cuda_stream)
w = torch.randn(HIDDEN, dtype=torch.bfloat16, device="cuda")
data = [dict(x=torch.randn(T, HIDDEN, dtype=torch.bfloat16, device="cuda"),
             r=torch.randn(T, HIDDEN, dtype=torch.bfloat16, device="cuda"),
             q=torch.empty(T, HIDDEN, dtype=torch.float8_e4m3fn, device="cuda"),
             s=torch.empty(T * (HIDDEN // 128), dtype=torch.float32, device="cuda")) for _ in range(SETS)]
cases = {
    "static": dict(mode="static"),
    "per_token": dict(mode="per_token"),
    "per_group fp32": dict(mode="per_group", group_size=128),
    "per_group ue8m0": dict(mode="per_group", group_size=128, ue8m0=True),
    "fused static": dict(mode="static", fused=True),
}
for name, kw in cases.items():
    kw = dict(kw)
    fused = kw.pop("fused", False)

    def run(i, kw=kw, fused=fused):
        d = data[i]
        scale = 0.02 if kw["mode"] == "static" else d["s"].data_ptr()
        if fused:
            pyrms.fused_add_rms_norm_quant(d["q"].data_ptr(), d["x"], d["r"], w, EPS, scale=scale, round_input=True, **kw)
        else:
            pyrms.rms_norm_quant(d["q"].data_ptr(), d["x"], w, EPS, scale=scale, round_input=True, **kw)
    us = sorted(timing.median_us(timer, run, SETS, REPS) for _ in range(3))[1]
    print(f"{label:10s} {name:16s} {us:8.2f} us", flush=True)

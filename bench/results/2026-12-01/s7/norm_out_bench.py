"""What the unquantized output beside the quantized one costs (issue 14, norm_out), on the GPU: each mode of
rms_norm_quant and fused_add_rms_norm_quant at T x 5120 bf16 -> e4m3fn (round_input), without and with
norm_out, against the two launches it replaces (rms_norm, then the quantizing op without norm_out). Device
µs per call by pyrms.bench.timing.median_us (alternated: without, with, the pair, REPS rounds of each); bytes
as tools/bench_quant counts them plus the norm_out rows written; the copy ceiling as pyrms.bench measures it.

    PYTHONPATH=. python3 bench/results/2026-12-01/s7/norm_out_bench.py [tokens,...] > norm_out_bench.txt
"""
import sys

import torch

import pyrms
from pyrms import driver
from pyrms.bench import ceiling, timing

EPS, HIDDEN, REPS = 1e-6, 5120, 11
device = driver.selected_device()
timer = timing.EventTimer(device, torch.cuda.current_stream().cuda_stream)
ceil = ceiling.measure(timer, device, 1024, 10, "dtod 1 GiB")
print(f"copy ceiling {ceil.gbps:.0f} GB/s", flush=True)
w = torch.randn(HIDDEN, dtype=torch.bfloat16, device="cuda")
tokens_list = [int(t) for t in (sys.argv[1] if len(sys.argv) > 1 else "1,16,16384").split(",")]
for fused in (False, True):
    for mode in ("static", "per_token", "per_group"):
        for tokens in tokens_list:
            elems = tokens * HIDDEN
            scales = {"static": 0, "per_token": tokens, "per_group": tokens * (HIDDEN // 128)}[mode]
            base = elems * 2 + HIDDEN * 2 + elems + 4 * scales + (2 * elems * 2 if fused else 0)
            sets = max(2, min(16, (512 << 20) // (base + 2 * elems)))
            data = [dict(x=torch.randn(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda"),
                         r=torch.randn(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda"),
                         q=torch.empty(tokens, HIDDEN, dtype=torch.float8_e4m3fn, device="cuda"),
                         s=torch.empty(max(scales, 1), dtype=torch.float32, device="cuda"),
                         y=torch.empty(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda")) for _ in range(sets)]

            def quant(d, norm_out):
                scale = 0.02 if mode == "static" else d["s"].data_ptr()
                extra = dict(group_size=128) if mode == "per_group" else {}
                if norm_out is not None:
                    extra["norm_out"] = norm_out
                if fused:
                    pyrms.fused_add_rms_norm_quant(d["q"].data_ptr(), d["x"], d["r"], w, EPS, scale=scale, mode=mode,
                                                   round_input=True, **extra)
                else:
                    pyrms.rms_norm_quant(d["q"].data_ptr(), d["x"], w, EPS, scale=scale, mode=mode, round_input=True,
                                         **extra)

            def pair(d):  # both outputs without norm_out: two launches, the norm then the quantizing op
                scale = 0.02 if mode == "static" else d["s"].data_ptr()
                extra = dict(group_size=128) if mode == "per_group" else {}
                if fused:  # x <- norm(r <- x + r), then r's quantized norm
                    pyrms.fused_add_rms_norm(d["x"], d["r"], w, EPS)
                    pyrms.rms_norm_quant(d["q"].data_ptr(), d["r"], w, EPS, scale=scale, mode=mode, round_input=True,
                                         **extra)
                else:
                    pyrms.rms_norm(d["y"], d["x"], w, EPS)
                    quant(d, None)

            runs = {"without": lambda i: quant(data[i], None), "with norm_out": lambda i: quant(data[i], data[i]["y"]),
                    "norm then quant": lambda i: pair(data[i])}
            us = {name: [] for name in runs}
            for _ in range(3):
                for name, run in runs.items():
                    us[name].append(timing.median_us(timer, run, sets, REPS))
            us = {k: sorted(v)[1] for k, v in us.items()}
            with_bytes = base + 2 * elems
            frac = (with_bytes / (us["with norm_out"] * 1e-6)) / (ceil.gbps * 1e9)
            print(f"{'fused_add_rms_norm_quant' if fused else 'rms_norm_quant'} {mode} T={tokens:6d}: "
                  + " ".join(f"{k}={v:.2f}" for k, v in us.items())
                  + f" | norm_out costs {us['with norm_out'] - us['without']:+.2f} us, "
                    f"{us['norm then quant'] / us['with norm_out']:.2f}x faster than the pair, ceiling {frac:.3f}",
                  flush=True)
            del data

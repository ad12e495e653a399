"""Norm + fp8 quantization on the H200: pyrms.rms_norm_quant and fused_add_rms_norm_quant against torch's
norm then quantize (eager, torch.compile of each step apart, torch.compile of both together); docs/family.md.

    python -m tools.rms_norm_quant.bench [--tokens 1,16,128,1024,16384] [--hidden 5120] [--reps 15] [--json out.json]

bf16 rows of `hidden` elements, a bf16 weight, float8_e4m3fn output; modes static (one scale), per_token
(a scale per row, written) and per_group (a scale per GROUP elements of a row, row-major fp32, written). Bytes: read x (and the residual) and the weight, write q and the scales (and
the residual). Device time per call by the benchmark's method (pyrms.bench.timing: events around a batch
queued behind a spin kernel), the median of --reps samples; the copy ceiling as pyrms.bench measures it.
"pyrms" launches with PDL (its default), "pyrms (no pdl)" with pdl=False, as torch's kernels launch: the
speedups are of "pyrms (no pdl)", like for like, and the fraction of the ceiling of "pyrms (no pdl)" too.
"agree" is the fraction of q's bytes equal to torch eager's (which rounds the norm to bf16 first: pyrms
does so too with round_input, the vLLM rounding the rows here use). Needs PyTorch.
"""
from __future__ import annotations

import argparse
import sys

import pyrms
from pyrms import driver
from pyrms.bench import ceiling, eager, lab, timing

EPS = 1e-6
QMAX = 448.0  # float8_e4m3fn
MIN_SCALE = 1.0 / (QMAX * 512.0)  # the minimum per-token scale (docs/numerics.md)
STATIC_SCALE = 0.02
GROUP = 128  # per_group's group size (DeepSeek's 1x128)
MODES = ("static", "per_token", "per_group")


def torch_steps(torch):
    """(norm, add-then-norm, {mode: quantize}) as torch code, the pair an unfused stack runs."""

    def static(y):
        return (y.float() * (1.0 / STATIC_SCALE)).clamp(-QMAX, QMAX).to(torch.float8_e4m3fn)

    def per_token(y):
        s = (y.abs().amax(-1, keepdim=True).float() / QMAX).clamp(min=MIN_SCALE)
        return (y.float() / s).clamp(-QMAX, QMAX).to(torch.float8_e4m3fn), s

    def per_group(y):
        g = y.float().view(*y.shape[:-1], y.shape[-1] // GROUP, GROUP)
        s = (g.abs().amax(-1, keepdim=True) / QMAX).clamp(min=MIN_SCALE)
        return (g / s).clamp(-QMAX, QMAX).to(torch.float8_e4m3fn).view(y.shape), s.squeeze(-1)

    return eager.norm(torch, EPS), eager.add_norm(torch, EPS), {"static": static, "per_token": per_token, "per_group": per_group}


def implementations(torch, fused: bool, mode: str):
    """name -> run(x, r, w, q, s): each writes q (and s), reading x (and r, updated in place by pyrms)."""
    norm, add_norm, quants = torch_steps(torch)
    quant = quants[mode]
    grouping = dict(group_size=GROUP) if mode == "per_group" else {}

    def pyrms_run(x, r, w, q, s, pdl=True):
        scale = STATIC_SCALE if mode == "static" else s.data_ptr()
        if fused:
            pyrms.fused_add_rms_norm_quant(q.data_ptr(), x, r, w, EPS, scale=scale, mode=mode, round_input=True,
                                           pdl=pdl, **grouping)
        else:
            pyrms.rms_norm_quant(q.data_ptr(), x, w, EPS, scale=scale, mode=mode, round_input=True, pdl=pdl,
                                 **grouping)

    def eager(x, r, w, q, s, n=norm, a=add_norm, qf=quant):
        return qf(a(x, r, w)[0] if fused else n(x, w))

    c_norm, c_add, c_quant = torch.compile(norm, dynamic=False), torch.compile(add_norm, dynamic=False), \
        torch.compile(quant, dynamic=False)
    whole = torch.compile(eager, dynamic=False)
    return {
        "pyrms": pyrms_run,
        "pyrms (no pdl)": lambda x, r, w, q, s: pyrms_run(x, r, w, q, s, pdl=False),
        "torch eager": eager,
        "compile pair": lambda x, r, w, q, s: eager(x, r, w, q, s, c_norm, c_add, c_quant),
        "compile fused": whole,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1,16,128,1024,16384")
    ap.add_argument("--hidden", type=int, default=5120)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch  # after the arguments: --help needs no PyTorch

    device = driver.selected_device()
    timer = timing.EventTimer(device, torch.cuda.current_stream().cuda_stream)
    ceil = ceiling.measure(timer, device, 1024, 10, "dtod 1 GiB")
    print(f"copy ceiling {ceil.gbps:.0f} GB/s", flush=True)
    hidden = args.hidden
    w = torch.randn(hidden, dtype=torch.bfloat16, device="cuda")
    results = []
    for fused in (False, True):
        for mode in MODES:
            if mode == "per_group" and hidden % GROUP:
                print(f"per_group skipped: hidden {hidden} is not a multiple of {GROUP}", flush=True)
                continue
            # Dynamo keys its cache by code object: the four configurations' `eager` share one, and 8 shapes
            # (its recompile limit) would leave the later ones running uncompiled (once seen in the fused add rows).
            torch._dynamo.reset()
            impls = implementations(torch, fused, mode)
            for tokens in (int(t) for t in args.tokens.split(",")):
                elems = tokens * hidden
                scales = {"static": 0, "per_token": tokens, "per_group": tokens * (hidden // GROUP)}[mode]
                nbytes = elems * 2 + hidden * 2 + elems + 4 * scales + (2 * elems * 2 if fused else 0)
                sets = max(2, min(16, (512 << 20) // nbytes))
                data = [(torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda"),
                         torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda"),
                         torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device="cuda"),
                         torch.empty(max(scales, 1), dtype=torch.float32, device="cuda")) for _ in range(sets)]
                row = {"op": "fused_add_rms_norm_quant" if fused else "rms_norm_quant", "mode": mode, "tokens": tokens,
                       "hidden": hidden, "bytes": nbytes, "us": {}}
                # agreement with torch eager on fresh copies (pyrms's fused add updates the residual in place)
                x, r, q, s = (t.clone() for t in data[0])
                want = impls["torch eager"](x, r.clone(), w, q, s)
                want = want[0] if isinstance(want, tuple) else want
                impls["pyrms"](x, r, w, q, s)
                torch.cuda.synchronize()
                row["agree"] = float((q.view(torch.uint8) == want.view(torch.uint8)).float().mean())
                runs = {}
                for name, impl in impls.items():
                    def run(i, impl=impl):
                        x, r, q, s = data[i]
                        impl(x, r, w, q, s)
                    runs[name] = run
                row["us"] = timing.median_us_each(timer, runs, sets, args.reps, synchronize=torch.cuda.synchronize,
                                                  where=f"T={tokens}")
                # Like for like: torch's kernels launch without PDL, so the ratios are of pyrms without it.
                row.update(lab.figures(row["us"], nbytes, ceil.gbps, versus={"compile_pair": "compile pair"}))
                results.append(row)
                print(f"{row['op']} {mode} T={tokens:6d}: {timing.cells(row['us'])} | "
                      f"vs pair {row['speedup_vs_compile_pair'] or 0:.2f}x "
                      f"vs fastest {row['speedup_vs_fastest_other'] or 0:.2f}x ceiling "
                      f"{row['fraction_of_ceiling'] or 0:.3f} agree {row['agree']:.4f}", flush=True)
                del data
    if args.json:
        lab.write_json(args.json, ceil.gbps, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

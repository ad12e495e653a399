#!/usr/bin/env python3
"""Host µs per call of every op, against the bare cuLaunchKernel calls that op makes (issue 11's
host targets), on the GPU machine: raw ints for every op; pyrms.rms_norm on pyrms.Tensor, torch
tensors as they are, CuPy (CAI) and DLPack-only objects; pyrms.torch.rms_norm and F.rms_norm.

Each variant runs in batches of 200 calls, variants interleaved, medians over batches; the bare
figure for an op replays exactly the launches one call of that op made (pyrms.bench.host), so the
ratio is the op's Python cost over the driver call. Writes a JSON and prints a table.

    PYTHONPATH=. python3 tools/host_overhead.py --out bench/results/DATE/host.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import pyrms
from pyrms import driver
from pyrms.bench import host

TOKENS, HIDDEN = 1, 4096
TARGETS = {"rms_norm": 1.15}  # every other op: 1.25; arrays through pyrms.rms_norm: 2.0


def _bare_of(call) -> callable:
    """One function replaying the launches `call` makes, each through a bare cuLaunchKernel."""
    call()
    driver.synchronize()
    with host.recorded_launches() as made:
        call()
    driver.synchronize()
    bares = [host.bare_launcher(m) for m in made]
    if len(bares) == 1:
        return bares[0]
    return lambda: [b() for b in bares]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch = __import__("torch")
    dev = torch.device("cuda", 0)
    t = lambda *shape: torch.randn(*shape, device=dev, dtype=torch.bfloat16)  # noqa: E731
    x, r, y, dy, gx = (t(TOKENS, HIDDEN) for _ in range(5))
    w, b = t(HIDDEN), t(HIDDEN)
    gw = torch.empty(HIDDEN, device=dev, dtype=torch.float32)
    p = {name: v.data_ptr() for name, v in dict(x=x, r=r, y=y, dy=dy, gx=gx, w=w, b=b, gw=gw).items()}
    stream = torch.cuda.current_stream().cuda_stream
    bf = "bfloat16"
    ops = {
        "rms_norm": lambda: pyrms.rms_norm(p["y"], p["x"], p["w"], 1e-6, TOKENS, HIDDEN, dtype=bf, stream=stream),
        "fused_add_rms_norm": lambda: pyrms.fused_add_rms_norm(p["x"], p["r"], p["w"], 1e-6, TOKENS, HIDDEN, dtype=bf,
                                                               stream=stream),
        "layer_norm": lambda: pyrms.layer_norm(p["y"], p["x"], p["w"], p["b"], 1e-6, TOKENS, HIDDEN, dtype=bf,
                                               stream=stream),
        "rms_norm_backward": lambda: pyrms.rms_norm_backward(p["gx"], p["gw"], p["dy"], p["x"], p["w"], 1e-6, TOKENS,
                                                             HIDDEN, dtype=bf, grad_weight_dtype="float32",
                                                             stream=stream),
    }
    variants = {}
    for name, call in ops.items():
        variants[f"bare {name}"] = _bare_of(call)
        variants[f"{name} raw ints"] = call
    px, pw, py = (pyrms.Tensor(v.data_ptr(), tuple(v.shape), bf, device=0) for v in (x, w, y))
    variants["rms_norm pyrms.Tensor"] = lambda: pyrms.rms_norm(py, px, pw, 1e-6, stream=stream)
    variants["rms_norm torch tensors"] = lambda: pyrms.rms_norm(y, x, w, 1e-6, stream=stream)
    try:
        import cupy

        cx, cw, cy = (cupy.asarray(torch.empty(v.shape, device=dev, dtype=torch.float16)) for v in (x, w, y))
        variants["rms_norm CuPy (CAI)"] = lambda: pyrms.rms_norm(cy, cx, cw, 1e-6, stream=stream)
    except ImportError:
        pass
    try:
        import pyrms.torch as pt

        variants["pyrms.torch.rms_norm"] = lambda: pt.rms_norm(x, w, 1e-6)
    except ImportError as exc:
        print(f"pyrms.torch: {exc}", file=sys.stderr)
    F = torch.nn.functional
    variants["F.rms_norm"] = lambda: F.rms_norm(x, (HIDDEN,), w, 1e-6)
    for fn in variants.values():
        fn()
    torch.cuda.synchronize()
    host._time_batches(variants, 3)
    samples = host._time_batches(variants, args.batches)
    med = {k: float(np.median(v)) for k, v in samples.items()}
    rows = []
    for name, us in med.items():
        op = name.split()[0]
        bare = med.get(f"bare {op}") if op in ops else med["bare rms_norm"]
        ratio = us / bare if not name.startswith("bare") else 1.0
        target = None
        if name.endswith("raw ints"):
            target = TARGETS.get(op, 1.25)
        elif op == "rms_norm" and not name.endswith("raw ints"):
            target = 2.0
        elif name == "pyrms.torch.rms_norm":
            target = med["F.rms_norm"] / bare
        verdict = "" if target is None else ("PASS" if ratio <= target else "FAIL") + f" (target <= {target:.2f}x)"
        rows.append({"variant": name, "us": us, "ratio_to_bare": ratio, "target": target, "verdict": verdict})
        print(f"{name:32s} {us:8.2f} us  {ratio:5.2f}x bare  {verdict}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"shape": [TOKENS, HIDDEN], "rows": rows, "samples_us": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

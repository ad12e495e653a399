"""Time one RMSNorm training step through autograd, forward + backward, as a training loop runs it: pyrms.torch's
``rms_norm`` against ``torch.nn.functional.rms_norm`` (and, with --compile, torch.compile of Hugging Face's
formula), in the two set-ups a trainer uses (needs a GPU and torch):

- bf16: x, the weight and the gradient in bfloat16;
- autocast: an fp32 weight (master weights) beside bf16 x, the forward under ``torch.autocast(dtype=bfloat16)``.

A step is ``y = norm(x, w); y.backward(g)`` with x and w requiring gradients (the gradients accumulate; a step's
cost does not depend on it). Time per step: CUDA events around --steps steps queued back to back, host time
included (what autograd's dispatch adds is part of what a training step pays); rounds alternate the
implementations, the first of each round rotating, so a drift of the machine's speed falls on all of them alike.
Prints the median and the spread (max - min over rounds, of the median) per implementation and pyrms's time over
F.rms_norm's; --json writes every round's time. --profile then runs --steps more steps of each implementation under
torch.profiler and prints, per implementation, the kernels' device time and the host's time per step beside the
step's wall time: which of the two bounds the step.

    python -m tools.autograd_step                              # [8, 1024, 4096], both set-ups
    python -m tools.autograd_step --shape 8x1024x4096 --setups autocast --compile --json /tmp/step.json
    python -m tools.autograd_step --setups bf16 --profile                 # where a step's time goes
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

SETUPS = ("bf16", "autocast")


def shape_argument(text: str) -> tuple[int, ...]:
    """A shape spelled ``8x1024x4096`` (every size a positive integer, at least two of them)."""
    try:
        sizes = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        sizes = ()
    if len(sizes) < 2 or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"a shape is positive sizes joined by x, e.g. 8x1024x4096; got {text!r}")
    return sizes


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a positive integer, got {text!r}")
    return value


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.autograd_step", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=shape_argument, default=(8, 1024, 4096), help="x's shape, default 8x1024x4096")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma list of {', '.join(SETUPS)} (default both)")
    parser.add_argument("--steps", type=positive, default=20, help="steps timed together (default 20)")
    parser.add_argument("--rounds", type=positive, default=7, help="rounds over the implementations (default 7)")
    parser.add_argument("--compile", action="store_true", help="also torch.compile of Hugging Face's formula")
    parser.add_argument("--json", help="write every round's time per step (µs) here")
    parser.add_argument("--profile", action="store_true",
                        help="then profile --steps steps of each implementation: device time per kernel, host time")
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    bad = [s for s in setups if s not in SETUPS]
    if bad or not setups:
        parser.error(f"--setups takes {', '.join(SETUPS)}; got {args.setups!r}")
    args.setups = setups
    return args


def hf_rms_norm(x, weight, eps: float):
    """Hugging Face LLaMA's RMSNorm formula: fp32 inside, the normalized x rounded to x's dtype, times the weight."""
    import torch

    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def implementations(compile_hf: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import pyrms.torch as pt

    impls = {"F.rms_norm": lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
             "pyrms.torch": lambda x, w, eps: pt.rms_norm(x, w, eps)}
    if compile_hf:
        impls["torch.compile (HF)"] = torch.compile(hf_rms_norm)
    return impls


def step(fn, x, w, g, eps: float, autocast: bool) -> None:
    """One training step of the norm: ``fn(x, w, eps).backward(g)``, the forward under autocast where asked."""
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        y = fn(x, w, eps)
    y.backward(g)


def step_time(fn, x, w, g, eps: float, steps: int, autocast: bool) -> float:
    """µs per step of ``fn(x, w, eps).backward(g)`` over `steps` steps (CUDA events, host time included)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(fn, x, w, g, eps, autocast)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / steps


def step_profile(fn, x, w, g, eps: float, steps: int, autocast: bool) -> dict:
    """Where `steps` steps' time goes, µs per step: ``wall`` (queued back to back, to the device's end), ``host``
    (to the last step queued: above ``device``, the host bounds the step), both without a profiler, then
    ``kernels``, each kernel's device time over another `steps` steps under torch.profiler, and ``device``,
    their sum."""
    import collections
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(fn, x, w, g, eps, autocast)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(fn, x, w, g, eps, autocast)
        torch.cuda.synchronize()
    kernels: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name] += event.time_range.elapsed_us() / steps
    return {"wall": wall * 1e6 / steps, "host": host * 1e6 / steps, "device": sum(kernels.values()),
            "kernels": dict(sorted(kernels.items(), key=lambda item: -item[1]))}


def profile_report(profiles: dict) -> str:
    """The profiles of ``run`` (setup -> implementation -> step_profile), a block per implementation."""
    lines = []
    for setup, by_impl in profiles.items():
        for name, p in by_impl.items():
            lines.append(f"{setup} {name}: wall {p['wall']:.1f} µs a step, host {p['host']:.1f}, kernels {p['device']:.1f}")
            lines += [f"    {us:8.1f}  {kernel[:100]}" for kernel, us in p["kernels"].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    import torch

    eps = 1e-6
    impls = implementations(args.compile)
    names = list(impls)
    results = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for setup in args.setups:
        autocast = setup == "autocast"
        x = torch.randn(args.shape, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        w = torch.randn(args.shape[-1], device="cuda", generator=gen,
                        dtype=torch.float32 if autocast else torch.bfloat16).requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            outputs = {name: fn(x, w, eps) for name, fn in impls.items()}
        g = torch.randn(args.shape, device="cuda", generator=gen, dtype=outputs["F.rms_norm"].dtype)
        for name, fn in impls.items():  # warm-up: compiles, the first launches, the caching allocator
            step_time(fn, x, w, g.to(outputs[name].dtype), eps, 3, autocast)
        times = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].append(step_time(impls[name], x, w, g.to(outputs[name].dtype), eps, args.steps, autocast))
            print(f"  {setup} round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        results[setup] = {"outputs": {name: str(y.dtype).removeprefix("torch.") for name, y in outputs.items()},
                          "times_us": times}
        if args.profile:
            results[setup]["profile"] = {name: step_profile(fn, x, w, g.to(outputs[name].dtype), eps, args.steps,
                                                            autocast) for name, fn in impls.items()}
    return results


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def report(args: argparse.Namespace, results: dict) -> str:
    shape = "x".join(map(str, args.shape))
    lines = [f"RMSNorm forward + backward through autograd, x [{shape}] bfloat16, µs per step (median of "
             f"{args.rounds} rounds of {args.steps} steps, +- spread over rounds)"]
    for setup, result in results.items():
        times = result["times_us"]
        base = statistics.median(times["F.rms_norm"])
        lines.append(f"{setup}:")
        for name, values in times.items():
            median = statistics.median(values)
            lines.append(f"  {name:20s} {median:9.1f} +-{spread(values) * 100:3.0f}%   x F.rms_norm {median / base:.2f}"
                         f"   output {result['outputs'][name]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("tools.autograd_step needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    results = run(args)
    print(report(args, results))
    if args.profile:
        print(profile_report({setup: result["profile"] for setup, result in results.items()}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": list(args.shape), "steps": args.steps, "rounds": args.rounds,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

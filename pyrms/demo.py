"""``python -m pyrms.demo``: the seed's C++ program, replicated through the CUDA driver API.

Same inputs (glibc's rand() after srand(seed); without --seed, seeded from the clock like
``srand(time(nullptr))``), same banners, same printing (C++'s default float output is
printf's %g), the same kernel by default (the seed's, compiled by NVRTC). Standard output is
exactly the C++ program's, so the two can be compared with ``diff``; the one line the C++ program
does not print, the largest |GPU - CPU| difference, goes to standard error.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from . import dtypes, errors
from .crand import RAND_MAX, GlibcRand
from .ops.seed.twin import seed_rms_norm_cpu

F32 = np.float32


def seed_inputs(seed: int, num_tokens: int, hidden: int, dtype):
    """The C++ program's h_input and h_weight: uniform [0.2, 1.0) and [-0.02, 0.5), in fp32 arithmetic."""
    gen = GlibcRand(seed)
    draws = np.array([gen.rand() for _ in range(num_tokens * hidden + hidden)], dtype=np.int64)
    r = draws.astype(F32) / F32(RAND_MAX)  # float(rand()) / RAND_MAX: RAND_MAX converts to 2^31 as float
    x = F32(0.2) + r[: num_tokens * hidden] * (F32(1.0) - F32(0.2))
    w = F32(-0.02) + r[num_tokens * hidden:] * (F32(0.5) + F32(0.02))
    dt = dtypes.get(dtype)
    return x.astype(dt.numpy).reshape(num_tokens, hidden), w.astype(dt.numpy)


def format_row(name: str, data: np.ndarray, row: int) -> str:
    """print_row of the seed program: the first and last 10 values, each followed by a space."""
    values = data[row].astype(F32)
    count = min(10, values.size)
    first = "".join(f"{float(v):g} " for v in values[:count])
    last = "".join(f"{float(v):g} " for v in values[values.size - count:])
    return f"{name} row {row}:\n  first 10: {first}\n  last 10: {last}"


def run_gpu(kernel: str, x: np.ndarray, w: np.ndarray, epsilon: float) -> np.ndarray:
    """Allocate, copy, launch on a fresh stream, synchronize, copy back, free: the seed's main()."""
    from . import driver
    from .ops.rms_norm import rms_norm
    from .ops.seed import plan_seed, seed_rms_norm

    num_tokens, hidden = x.shape
    dt = dtypes.get(x.dtype)
    out = np.empty_like(x)
    with driver.DeviceBuffer(x.nbytes) as d_input, driver.DeviceBuffer(w.nbytes) as d_weight, \
            driver.DeviceBuffer(out.nbytes) as d_out:
        driver.memcpy_htod(d_input.ptr, x)
        driver.memcpy_htod(d_weight.ptr, w)
        print("-------------launch kernel-------------")
        with driver.Stream() as stream:
            if kernel == "seed":
                print(f"VEC_SIZE = {plan_seed(dt, hidden).vec_size}")
                seed_rms_norm(d_out.ptr, d_input.ptr, d_weight.ptr, epsilon, num_tokens, hidden, dtype=dt, stream=stream)
            else:
                print(f"VEC_SIZE = {dt.vec_elems}")
                rms_norm(d_out.ptr, d_input.ptr, d_weight.ptr, epsilon, num_tokens, hidden, dtype=dt, stream=stream)
            stream.synchronize()
        driver.memcpy_dtoh(out, d_out.ptr)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyrms.demo", description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--seed", type=int, default=None, help="srand() seed (default: the clock, like srand(time(nullptr)))")
    parser.add_argument("--tokens", type=int, default=5, help="rows (default 5)")
    parser.add_argument("--hidden", type=int, default=5120, help="hidden size (default 5120, Qwen3-32B)")
    parser.add_argument("--dtype", default="bfloat16", type=dtypes.argument,
                        help="bfloat16 (default), float16 or float32, or an alias: bf16, fp16, half, fp32, float")
    parser.add_argument("--kernel", default="seed", choices=("seed", "pyrms"),
                        help="'seed': the seed's kernel, as the C++ program runs it (default); 'pyrms': cuda_src/rms_norm.cu")
    parser.add_argument("--epsilon", type=float, default=1e-5, help="default 1e-5")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.hidden < 1:
        parser.error(f"--tokens and --hidden must be >= 1, got {args.tokens} and {args.hidden}")
    if not math.isfinite(args.epsilon) or args.epsilon < 0:
        parser.error(f"--epsilon must be finite and >= 0, got {args.epsilon}")
    seed = int(time.time()) if args.seed is None else args.seed
    from . import driver

    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"pyrms.demo: no CUDA GPU available: {reason}", file=sys.stderr)
        return 2

    print("-------------main-------------")
    x, w = seed_inputs(seed, args.tokens, args.hidden, args.dtype)
    try:
        gpu = run_gpu(args.kernel, x, w, args.epsilon)
    except (errors.PyrmsError, ValueError) as exc:
        print(f"pyrms.demo: {exc}", file=sys.stderr)
        return 1
    cpu = seed_rms_norm_cpu(x, w, args.epsilon)
    for t in range(args.tokens):
        print("============================")
        print(format_row("GPU", gpu, t))
        print(format_row("CPU", cpu, t))
    diff = np.abs(gpu.astype(np.float64) - cpu.astype(np.float64))
    print(f"max |GPU - CPU| = {diff.max():g} over {diff.size} values ({args.kernel} kernel, {args.dtype.name}, seed {seed})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

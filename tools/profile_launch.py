#!/usr/bin/env python3
"""Launch one pyrms op a few times on one shape, for a profiler to catch (needs a GPU):

    ncu --set full -k regex:rms_norm_kernel --launch-skip 2 --launch-count 1 \\
        python -m tools.profile_launch --shape 1x5120 --variant few

--op (default: the benchmark's headline op): any op whose benchmark declaration
(pyrms/ops/<family>/bench.py) has an example call; --variant few|many forces the row core's few-row or
many-row kernel (tests.support.testing.forced_row_variant); --pdl launches with programmatic dependent
launch (ops that launch without it ignore it). Inputs are random bf16 (or --dtype), weights in [-1, 1];
nothing is checked (the GPU tests do that).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import pyrms
from pyrms import driver, dtypes
from pyrms.bench import ops as bench_ops
from tests.support.testing import forced_row_variant


def main(argv=None) -> int:
    examples = {name: b.example for name, b in bench_ops.benches().items() if b.example is not None}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=tuple(examples), default=bench_ops.headline())
    parser.add_argument("--shape", default="1x5120", help="TOKENSxHIDDEN")
    parser.add_argument("--dtype", type=dtypes.argument, default="bfloat16")
    parser.add_argument("--variant", choices=("few", "many"), default=None)
    parser.add_argument("--pdl", action="store_true")
    parser.add_argument("--launches", type=int, default=5)
    args = parser.parse_args(argv)
    rows, hidden = map(int, args.shape.lower().split("x"))
    rng = np.random.default_rng(0)
    a, b, c = (pyrms.Tensor.from_numpy(rng.uniform(-2, 2, (rows, hidden)).astype(args.dtype.numpy)) for _ in range(3))
    w = pyrms.Tensor.from_numpy(rng.uniform(-1, 1, hidden).astype(args.dtype.numpy))
    bias = pyrms.Tensor.from_numpy(rng.uniform(-1, 1, hidden).astype(args.dtype.numpy))
    dw = pyrms.Tensor.empty((hidden,), args.dtype)
    call = examples[args.op](bench_ops.Example(rows, hidden, args.dtype, a, b, c, w, bias, dw, args.pdl))
    with forced_row_variant(args.variant):
        for _ in range(args.launches):
            call()
    driver.synchronize()
    print(f"{args.op} {args.shape} {args.dtype.name} variant={args.variant} pdl={args.pdl}: {args.launches} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())

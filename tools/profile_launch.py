#!/usr/bin/env python3
"""Launch one pyrms op a few times on one shape, for a profiler to catch (needs a GPU):

    ncu --set full -k regex:rms_norm_kernel --launch-skip 2 --launch-count 1 \\
        python -m tools.profile_launch --op rms_norm --shape 1x5120 --variant few

--variant few|many forces the row core's few-row or many-row kernel (tests.support.testing.forced_row_variant);
--pdl launches with programmatic dependent launch. Inputs are random bf16 (or --dtype), weights in
[-1, 1]; nothing is checked (the GPU tests do that).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import pyrms
from pyrms import driver, dtypes
from pyrms.ops import seed as seed_op
from tests.support.testing import forced_row_variant

OPS = ("rms_norm", "fused_add_rms_norm", "layer_norm", "rms_norm_backward", "seed")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=OPS, default="rms_norm")
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
    pdl = {} if args.op == "seed" else {"pdl": args.pdl}
    calls = {"rms_norm": lambda: pyrms.rms_norm(c, a, w, 1e-6, **pdl),
             "fused_add_rms_norm": lambda: pyrms.fused_add_rms_norm(a, b, w, 1e-6, **pdl),
             "layer_norm": lambda: pyrms.layer_norm(c, a, w, bias, 1e-5, **pdl),
             "rms_norm_backward": lambda: pyrms.rms_norm_backward(c, dw, b, a, w, 1e-6, **pdl),
             "seed": lambda: seed_op.seed_rms_norm(c.ptr, a.ptr, w.ptr, 1e-6, rows, hidden, dtype=args.dtype)}
    with forced_row_variant(args.variant):
        for _ in range(args.launches):
            calls[args.op]()
    driver.synchronize()
    print(f"{args.op} {args.shape} {args.dtype.name} variant={args.variant} pdl={args.pdl}: {args.launches} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())

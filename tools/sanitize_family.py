#!/usr/bin/env python3
"""The fused-add, LayerNorm and backward kernel matrix, small enough to run under compute-sanitizer.

Every dtype x every element misalignment of each pointer x hidden sizes with prefixes and tails
(both the shared-memory and the workspace homes of the backward's column sums) x strided rows x
in-place x options x (fused add, LayerNorm) the kernels for few and for many rows, each launch checked bit for bit against its twin (pyrms.testing). Prints the
number of launches; exit status 1 if any check failed. Run it under each tool:

    compute-sanitizer --tool memcheck --error-exitcode 3 python -m tools.sanitize_family
    compute-sanitizer --tool racecheck --error-exitcode 3 python -m tools.sanitize_family --quick
    compute-sanitizer --tool initcheck --error-exitcode 3 python -m tools.sanitize_family --quick
"""
from __future__ import annotations

import argparse
import sys

from pyrms import dtypes
from pyrms.testing import check_fused_add_rms_norm, check_layer_norm, check_norm_backward
from tools import sanitize_matrix

BACKWARD = ("grad_output", "input", "weight", "grad_input", "grad_weight")


def cases(quick: bool):
    hiddens = (1, 7, 769, 5125) if quick else (1, 7, 9, 769, 5125, 16384, 65537)
    for dtype in dtypes.ALL:
        n = dtype.vec_elems
        for hidden in hiddens:
            for variant in ("few", "many"):  # the row core's latency shape and the many-row shape
                for name in ("input", "residual", "weight"):
                    for off in range(n):
                        yield check_fused_add_rms_norm, dict(dtype=dtype, rows=2, hidden=hidden, offsets={name: off},
                                                             variant=variant)
                for name in ("input", "out", "weight", "bias"):
                    for off in range(n):
                        yield check_layer_norm, dict(dtype=dtype, rows=2, hidden=hidden, offsets={name: off},
                                                     variant=variant)
            for layer_norm in (False, True):
                for name in BACKWARD + (("grad_bias",) if layer_norm else ()):
                    for off in range(n):
                        yield check_norm_backward, dict(dtype=dtype, rows=18, hidden=hidden, layer_norm=layer_norm,
                                                        offsets={name: off})
                yield check_norm_backward, dict(dtype=dtype, rows=20, hidden=hidden, layer_norm=layer_norm,
                                                strides={"input": hidden + 3, "grad_output": hidden + 1},
                                                in_place="grad_output", rows_per_block=32, own_workspace=True)
            yield check_fused_add_rms_norm, dict(dtype=dtype, rows=3, hidden=hidden, gemma=True, round_once=True,
                                                 strides={"input": hidden + 3, "residual": hidden + 5})
            yield check_layer_norm, dict(dtype=dtype, rows=3, hidden=hidden, in_place=True, offsets={"input": n - 1})
            yield check_norm_backward, dict(dtype=dtype, rows=5, hidden=hidden, gemma=True, grad_dtype="float32")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer hidden sizes (for the slower racecheck)")
    args = parser.parse_args()
    return sanitize_matrix.run("sanitize_family", cases(args.quick))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The host side of ``python -m tools.random_check``, timed on a machine without a GPU.

Runs the same cases through the same tests.support.testing checkers, with device memory replaced by host
memory (allocations, uploads and whole-allocation downloads still move every byte) and the kernel
launches replaced by nothing; the comparisons run in full and their (expected) differences are
counted, not raised. What is left is what the GPU run spends on the CPU: drawing operands, the numpy
twin, and the bitwise comparisons. The twin is timed on its own too.

    python -m tools.random_check_host_time --seed 2026 --count 5000
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import types
from collections import Counter

import numpy as np

from pyrms.ops import registry
from tools import random_check
from tests.support import testing
from tests.support.random_cases import draw_cases


def _families() -> dict[str, list[str]]:
    """The packages of the op families that the randomized check draws (the registry's ``random`` entries),
    whose functions the checkers import from there, with those functions' names."""
    families: dict[str, list[str]] = {}
    for name, spec in registry.REGISTRY.items():
        if spec.random:
            families.setdefault(spec.module.rpartition(".")[0], []).append(name)
    return families


def _twins(package: str) -> list[str]:
    """The twins a family's ``twin`` module defines (functions named ``*_twin``; not those it imports)."""
    module = importlib.import_module(package + ".twin")
    return [name for name, value in vars(module).items()
            if name.endswith("_twin") and callable(value) and getattr(value, "__module__", None) == module.__name__]


class HostBuffer:
    """A DeviceBuffer stand-in: host bytes at a 256-byte aligned fake address, as cuMemAlloc gives."""

    _next = 1 << 40
    blocks: dict[int, np.ndarray] = {}

    def __init__(self, nbytes: int):
        self.ptr = HostBuffer._next
        HostBuffer._next += -(-nbytes // 256) * 256 + 256
        HostBuffer.blocks[self.ptr] = np.empty(nbytes, np.uint8)

    def close(self) -> None:
        HostBuffer.blocks.pop(self.ptr, None)


def _htod(ptr, host, stream=None):
    HostBuffer.blocks[ptr][:] = host.view(np.uint8).reshape(-1)


def _dtoh(whole, ptr, stream=None):
    whole.view(np.uint8).reshape(-1)[:] = HostBuffer.blocks[ptr]


def install(twin_seconds: Counter, differences: Counter, patch=setattr, compared: Counter | None = None) -> None:
    """Swap the device for host memory and no launches; time the twins; count, not raise, differences
    (by operand name), and count the operands compared in ``compared``. ``patch(obj, name, value)``:
    setattr, or pytest's monkeypatch.setattr to undo it."""
    patch(testing, "driver", types.SimpleNamespace(DeviceBuffer=HostBuffer, memcpy_htod=_htod, memcpy_dtoh=_dtoh,
                                                   synchronize=lambda: None))
    import pyrms.ops  # noqa: F401  (the op modules, so that their functions can be replaced)

    for package, names in _families().items():
        for name in names:
            patch(sys.modules[package], name, lambda *args, **kwargs: None)
        twins = importlib.import_module(package + ".twin")
        for name in _twins(package):
            patch(twins, name, _timed(getattr(twins, name), name, twin_seconds))
    compare = testing._compare

    def counting_compare(label, name, operand, want, **kwargs):
        if compared is not None:
            compared[name] += 1
        try:
            compare(label, name, operand, want, **kwargs)
        except AssertionError:
            differences[name] += 1

    patch(testing, "_compare", counting_compare)


_timing = [False]  # whether a timed twin is running: a twin that another calls is that one's time, not its own


def _timed(function, name, seconds: Counter):
    def timed(*args, **kwargs):
        if _timing[0]:
            return function(*args, **kwargs)
        _timing[0] = True
        t0 = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - t0
            _timing[0] = False
    return timed


def _size_class(elements: int) -> str:
    """rows * hidden, by powers of 16 (up to 64 K, up to 1 M, up to 16 M)."""
    bound = 1 << 16
    while elements > bound:
        bound <<= 4
    return f"<= {bound:>10,} elements"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--progress", type=int, default=500)
    args = parser.parse_args(argv)
    twin_seconds, differences = Counter(), Counter()
    install(twin_seconds, differences)
    t0 = time.perf_counter()
    cases = draw_cases(args.seed, args.count)
    draw_s = time.perf_counter() - t0
    per_op, per_size, sizes = Counter(), Counter(), Counter()

    def run_one(case):
        start = time.perf_counter()
        try:
            testing.check_case(random_check.data_rng(case), case.case)
        finally:
            size = _size_class(case.elements)
            per_op[case.op] += time.perf_counter() - start
            per_size[size] += time.perf_counter() - start
            sizes[size] += 1

    summary = random_check.run(cases, run_one=run_one, progress_every=args.progress)
    print("host seconds by op: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per_op.items())))
    print("host seconds by size: " + ", ".join(f"{k}: {sizes[k]} cases {v:.1f} s" for k, v in sorted(per_size.items())))
    print("twin seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(twin_seconds.items())))
    print("slowest: " + "; ".join(f"{x['s']:.2f} s {x['case']}" for x in summary["slowest"]))
    for failure in summary["failures"]:
        print(f"error (a harness fault, not a kernel's): {failure['error']}")
    print(f"host time: seed {args.seed}, {summary['ran']} cases, {summary['elements'] / 1e6:.0f} M elements: "
          f"{summary['wall_s']:.1f} s host side ({sum(twin_seconds.values()):.1f} s of it in the twin), "
          f"{draw_s:.1f} s drawing; {summary['failed']} errors")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

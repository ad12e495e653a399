"""Device time per launch: CUDA events around a batch of launches queued behind a spin kernel.

Why the spin: a Python call costs microseconds of host time (tens for torch.compile's wrapper), and a
small RMSNorm runs for about as long on the device. Events around launches made one by one would then
time the host. Here a one-thread kernel first holds the stream for longer than the host needs to
queue the whole batch; the start event sits after it, so the device runs the batch back to back and
the events see device time only. Each sample checks that the host really finished queueing before
the spin ended, and is redone with a longer spin if not (counted as ``host_bound``).

Everything runs on one stream (the legacy default stream unless PyTorch's current stream is another):
pyrms Events are recorded on it, and pyrms, the seed kernel, PyTorch, torch.compile and Triton all
launch on it, so one timing method serves every implementation.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from .. import compiler, driver, launch

SPIN_NAME = "pyrms_bench_spin"
SPIN_SOURCE = r"""
// Holds the stream for about `nanoseconds` (%globaltimer counts ns). clock64() bounds the wait too
// (4 cycles per ns lasts at least as long at any clock up to 4 GHz), so that a timer that stood
// still on some virtualized GPU could never hang the benchmark.
extern "C" __global__ void pyrms_bench_spin(long long nanoseconds) {
    unsigned long long start, now;
    long long first_cycle = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while ((long long)(now - start) < nanoseconds && clock64() - first_cycle < 4 * nanoseconds);
}
"""
MAX_SPIN_US = 200_000.0
HOST_MARGIN = 0.8  # the host must finish queueing within this fraction of the spin
REDO_LIMIT = 4


def compile_spin(arch: str) -> bytes:
    """CUBIN of the spin kernel for ``arch`` (e.g. 'sm_90'): a few lines of NVRTC, no headers."""
    return compiler.compile_text("pyrms_bench_spin.cu", SPIN_SOURCE, arch=arch).cubin


@dataclass
class Cursor:
    """Where an implementation's timing stands: the next rotation set, and the spin it needs."""

    sets: int
    batch: int
    cursor: int = 0
    spin_us: float = 200.0
    host_bound: int = 0


class EventTimer:
    """Times batches of launches on ``stream`` (a raw handle) with pyrms Events."""

    def __init__(self, device: driver.Device, stream: int):
        self.device = device
        self.stream = stream
        self._spin = launch.load_module(compile_spin(device.arch), device).function(SPIN_NAME, ("i64",))
        self._events = [driver.Event(device=device) for _ in range(3)]

    def close(self) -> None:
        for e in self._events:
            e.close()

    def spin(self, microseconds: float) -> None:
        self._spin.launch(1, 1, (int(microseconds * 1000),), self.stream)

    def warm_up(self, run, sets: int, at_least: int) -> float:
        """Call ``run(i)`` over every rotation set (and at least ``at_least`` times), wait; returns
        the host wall time per call in µs (an upper bound of the host cost, used to size the spin)."""
        count = max(sets, at_least)
        start = time.perf_counter()
        for i in range(count):
            run(i % sets)
        driver.synchronize()
        return (time.perf_counter() - start) * 1e6 / count

    def sample(self, run, state: Cursor) -> float:
        """One sample: device µs per launch over ``state.batch`` launches. Redone with a longer
        spin while the host has not queued the batch before the spin ended."""
        before, start, end = self._events
        for attempt in range(REDO_LIMIT + 1):
            before.record(self.stream)
            self.spin(state.spin_us)
            host_start = time.perf_counter()
            start.record(self.stream)
            cursor, sets = state.cursor, state.sets
            for j in range(state.batch):
                run((cursor + j) % sets)
            end.record(self.stream)
            host_ms = (time.perf_counter() - host_start) * 1e3
            end.synchronize()
            spin_ms = start.elapsed_ms(before)
            device_ms = end.elapsed_ms(start)
            state.cursor = (cursor + state.batch) % sets
            if host_ms < HOST_MARGIN * spin_ms or attempt == REDO_LIMIT:
                return device_ms * 1e3 / state.batch
            state.host_bound += 1
            state.spin_us = min(MAX_SPIN_US, max(2 * state.spin_us, 2 * host_ms * 1e3))
        raise AssertionError("unreachable")

    def samples(self, run, state: Cursor, count: int) -> list[float]:
        return [self.sample(run, state) for _ in range(count)]


def initial_spin_us(host_us_per_call: float, batch: int) -> float:
    """A spin long enough for the host to queue ``batch`` calls, with room to spare."""
    return min(MAX_SPIN_US, max(100.0, 2.0 * host_us_per_call * batch + 50.0))


def median_us(timer: EventTimer, run, sets: int, reps: int, batch: int = 20) -> float:
    """Median device µs per ``run(i)`` call: a warm-up over every rotation set, then ``reps``
    samples of ``batch`` calls behind the spin. For tools that time one kernel variant at a time
    (tools/tune_*.py); the benchmark itself interleaves implementations in rounds instead."""
    host_us = timer.warm_up(run, sets, 3)
    state = Cursor(sets=sets, batch=batch, spin_us=initial_spin_us(host_us, batch))
    samples = sorted(timer.samples(run, state, reps))
    return samples[len(samples) // 2]


def median_us_each(timer: EventTimer, runs: Mapping[str, Callable[[int], object]], sets: int, reps: int, *,
                   synchronize: Callable[[], object], where: str,
                   after_first: Callable[[str], object] | None = None) -> dict[str, float | None]:
    """``median_us`` of each named ``run(i)`` in turn, for tools that set several implementations of one
    shape side by side (the op-specific timing tools under tools/<op>/). Each is first called once on set 0
    and ``synchronize()``d, so that an error surfaces before its timing, then ``after_first(name)`` runs
    (a tool keeps that output there, before the next implementation overwrites it). One that raises
    anywhere gets None and a line ``  NAME failed at WHERE: Type: message`` on stderr: an implementation
    that cannot run a shape is reported, not fatal."""
    us: dict[str, float | None] = {}
    for name, run in runs.items():
        try:
            run(0)
            synchronize()
            if after_first is not None:
                after_first(name)
            us[name] = median_us(timer, run, sets, reps)
        except Exception as exc:
            us[name] = None
            print(f"  {name} failed at {where}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return us


def cells(us: Mapping[str, float | None]) -> str:
    """``name=12.34 other=n/a``: medians as the tools print them (n/a for one that did not run)."""
    return " ".join(f"{k}={v:.2f}" if v else f"{k}=n/a" for k, v in us.items())

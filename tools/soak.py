#!/usr/bin/env python3
"""Soak: many launches and allocations without growth of device memory or host RSS; out of memory
as a clear exception that leaves the runtime usable.

  launches     LAUNCHES launches of the case matrix's "launches" case (an RMSNorm forward, bf16, 8 x 4096)
               on one pyrms.Stream, nine in ten through the raw-pointer fast path, one in ten through
               pyrms.Tensor arguments (the general path); the output checked bit for bit against the twin
               at the end.
  allocations  CYCLES allocate/free cycles of 1 KiB to 64 MiB: DeviceBuffer + close(), DeviceBuffer
               as a context manager with a memset, Tensor.empty + close(), DeviceBuffer dropped without
               close() (freed by its finalizer), PinnedBuffer written through numpy + close().
  short-lived streams  STREAMS times: a new pyrms.Stream, one launch of the "streams" case (an RMSNorm
               backward) on it, the stream closed (a server's stream per request); the backward's
               workspace must not outlive its stream.
  out of memory  an allocation of (free device memory + 1 GiB) must raise pyrms.OutOfMemoryError
               naming the size and the free memory, and so must Tensor.empty of that size; then a
               normal allocation and launch must work. Then (unless --no-exhaust) device memory is
               filled to the last 2 MiB, an already loaded kernel and a kernel not yet loaded (the
               "exhausted" case's, a LayerNorm forward) are launched (each either works or raises a
               pyrms error; the process must survive), the memory is freed, and both kernels must
               then give the twin's bits (no broken kernel left cached).

The cases are tests.support.case_matrix.SOAK's, each launched through tests.support.raw_calls.
Before and after each phase (after a warm-up, a synchronize and gc.collect()): device free memory
(Device.mem_info) and host RSS (VmRSS of /proc/self/status); sampled ten times during each phase.
Bounds: device free memory may drop by at most DEVICE_BOUND, RSS grow by at most RSS_BOUND per phase.

    python -m tools.soak [--quick] [--launches N] [--cycles N] [--streams N] [--no-streams] [--no-exhaust]
                         [--out FILE.json]

--quick: 10,000 launches, 1,000 cycles, 100 streams. Prints one line per phase, then "soak: PASS|FAIL ..."
last; exit status 1 if a bound is exceeded or a check fails.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

import pyrms
from pyrms import driver, dtypes, errors
from tests.support import case_matrix, raw_calls
from tests.support.testing import bits

MiB = 1 << 20
GiB = 1 << 30
DEVICE_BOUND = 8 * MiB
RSS_BOUND = 16 * MiB
# The shapes are tests.support.case_matrix.SOAK's, as the other checks take theirs from the matrix.
LAUNCHES, EXHAUSTED, STREAMS = (case_matrix.SOAK[k] for k in ("launches", "exhausted", "streams"))
DT = dtypes.get(LAUNCHES.dtype)
SIZES = (1 << 10, 1 << 16, MiB + 17, 3 * MiB, 16 * MiB, 64 * MiB)


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Meter:
    """Device free memory and host RSS at the start, at samples and at the end of a phase."""

    def __init__(self, device):
        self.device = device
        self.samples = []

    def settle(self) -> tuple[int, int]:
        driver.synchronize()
        gc.collect()
        return self.device.mem_info()[0], rss()

    def start(self):
        self.free0, self.rss0 = self.settle()
        self.samples = [(self.free0, self.rss0)]

    def sample(self):
        self.samples.append((self.device.mem_info()[0], rss()))

    def finish(self, name: str) -> dict:
        self.free1, self.rss1 = self.settle()
        self.samples.append((self.free1, self.rss1))
        device_drop = self.free0 - self.free1
        rss_growth = self.rss1 - self.rss0
        return dict(phase=name, device_free_before=self.free0, device_free_after=self.free1,
                    device_free_min=min(s[0] for s in self.samples), device_drop=device_drop,
                    device_bound=DEVICE_BOUND, rss_before=self.rss0, rss_after=self.rss1,
                    rss_max=max(s[1] for s in self.samples), rss_growth=rss_growth, rss_bound=RSS_BOUND,
                    rss_samples_mib=[round(s[1] / MiB, 1) for s in self.samples],
                    within_bounds=device_drop <= DEVICE_BOUND and rss_growth <= RSS_BOUND)


def mib(n: int) -> str:
    return f"{n / MiB:+.1f} MiB"


class Operands:
    """A case's operands (tests.support.case_matrix: dense and aligned, as a server's tensors are), its
    outputs poisoned, and its call on them (tests.support.raw_calls): on the raw pointers (the fast path) or
    on the pyrms Tensors (the general path); the twin's answer to check them against."""

    def __init__(self, case, rng):
        self.case, dt = case, dtypes.get(case.dtype)
        vectors = case_matrix.operands(case.op)[1]
        self.outputs = raw_calls.outputs(case.op)
        shapes = {name: (1 if name in vectors else case.rows, case.hidden) for name in case_matrix.pointers(case.op)}
        self.host = {name: rng.uniform(*((-2, 2) if name == "input" else (-1, 1)), shape).astype(dt.numpy)
                     for name, shape in shapes.items() if name not in self.outputs}
        self.tensors = {name: pyrms.Tensor.from_numpy(values[0] if name in vectors else values)
                        for name, values in self.host.items()}
        self.tensors.update({name: pyrms.Tensor.empty((case.hidden,) if name in vectors else shapes[name], dt)
                             for name in self.outputs})
        self.ptrs = {name: tensor.ptr for name, tensor in self.tensors.items()}
        self.want = raw_calls.twin(case, self.host, {"input": 0, "weight": 0})  # aligned rows: every phase 0
        self.poison()

    def poison(self) -> None:
        for name in self.outputs:
            self.tensors[name].fill_bytes(0xFF)

    def launch(self, stream, general: bool = False) -> None:
        if general:
            raw_calls.launch(self.case, self.tensors, stream)
        else:
            handle = stream.handle if isinstance(stream, pyrms.Stream) else stream
            raw_calls.launch(self.case, self.ptrs, handle)

    def correct(self) -> bool:
        """Whether every output holds the twin's bits."""
        driver.synchronize()
        return all(np.array_equal(bits(self.tensors[name].to_numpy().reshape(self.want[name].shape)),
                                  bits(self.want[name])) for name in self.outputs)

    def run(self) -> bool:
        """Poison, one launch through the general path on the default stream, and the check."""
        self.poison()
        self.launch(None, general=True)
        return self.correct()

    def close(self):
        for t in self.tensors.values():
            t.close()


def launches_phase(device, count: int, rng) -> dict:
    ops = Operands(LAUNCHES, rng)
    stream = pyrms.Stream()
    meter = Meter(device)
    for i in range(2000):  # warm-up: the kernel loaded, both paths' caches filled
        ops.launch(stream, general=i % 10 == 9)
    meter.start()
    start = time.perf_counter()
    every = max(1, count // 10)
    for i in range(count):
        ops.launch(stream, general=i % 10 == 9)
        if (i + 1) % every == 0:
            stream.synchronize()
            meter.sample()
    stream.synchronize()
    seconds = time.perf_counter() - start
    correct = ops.correct()
    result = meter.finish("launches")  # before freeing the operands: what stays allocated is measured
    ops.close()
    stream.close()
    result.update(launches=count, seconds=round(seconds, 3), host_us_per_launch=round(seconds / count * 1e6, 2),
                  output_bitwise_equal_to_twin=correct, ok=result["within_bounds"] and correct)
    print(f"launches: {count} {LAUNCHES.op} launches in {seconds:.2f} s ({result['host_us_per_launch']} us each); "
          f"device free memory {mib(-result['device_drop'])} (bound {mib(-DEVICE_BOUND)}), host RSS "
          f"{mib(result['rss_growth'])} (bound {mib(RSS_BOUND)}, max {result['rss_max'] / MiB:.1f} MiB); output "
          f"equal to the twin: {'yes' if correct else 'NO'} -> {'ok' if result['ok'] else 'FAIL'}", flush=True)
    return result


def allocations_phase(device, cycles: int) -> dict:
    def cycle(c: int) -> None:
        size = SIZES[c % len(SIZES)]
        mode = c % 5
        if mode == 0:
            driver.DeviceBuffer(size).close()
        elif mode == 1:
            with driver.DeviceBuffer(size) as buffer:
                driver.memset_d8(buffer.ptr, c & 0xFF, size)
        elif mode == 2:
            pyrms.Tensor.empty((max(1, size // 2),), DT).close()
        elif mode == 3:
            buffer = driver.DeviceBuffer(size)
            del buffer  # no close(): the finalizer frees it
        else:
            with driver.PinnedBuffer(min(size, 4 * MiB)) as pinned:
                pinned.numpy(np.uint8)[:] = c & 0xFF

    meter = Meter(device)
    for c in range(50):  # warm-up
        cycle(c)
    meter.start()
    start = time.perf_counter()
    every = max(1, cycles // 10)
    for c in range(cycles):
        cycle(c)
        if (c + 1) % every == 0:
            meter.sample()
    seconds = time.perf_counter() - start
    result = meter.finish("allocations")
    result.update(cycles=cycles, seconds=round(seconds, 3), us_per_cycle=round(seconds / cycles * 1e6, 1),
                  ok=result["within_bounds"])
    print(f"allocations: {cycles} allocate/free cycles of {SIZES[0]} B to {SIZES[-1] // MiB} MiB in {seconds:.2f} s; "
          f"device free memory {mib(-result['device_drop'])} (bound {mib(-DEVICE_BOUND)}), host RSS "
          f"{mib(result['rss_growth'])} (bound {mib(RSS_BOUND)}) -> {'ok' if result['ok'] else 'FAIL'}", flush=True)
    return result


def streams_phase(device, count: int, rng) -> dict:
    """A server's pattern: a new stream per request, one launch of the STREAMS case on it, the stream closed."""
    ops = Operands(STREAMS, rng)

    def request() -> None:
        stream = pyrms.Stream()
        ops.launch(stream, general=True)
        stream.synchronize()
        stream.close()

    meter = Meter(device)
    for _ in range(20):  # warm-up
        request()
    meter.start()
    start = time.perf_counter()
    every = max(1, count // 10)
    for i in range(count):
        request()
        if (i + 1) % every == 0:
            meter.sample()
    seconds = time.perf_counter() - start
    result = meter.finish("short-lived streams")
    ops.close()
    result.update(requests=count, seconds=round(seconds, 3), ok=result["within_bounds"])
    print(f"short-lived streams: {count} x (new Stream, {STREAMS.op}, close) in {seconds:.2f} s; device free "
          f"memory {mib(-result['device_drop'])} (bound {mib(-DEVICE_BOUND)}; "
          f"{result['device_drop'] / count / 1024:.0f} KiB per stream), host RSS {mib(result['rss_growth'])} "
          f"(bound {mib(RSS_BOUND)}) -> {'ok' if result['ok'] else 'FAIL'}", flush=True)
    return result


def _expect_oom(what: str, make, nbytes: int, device) -> dict:
    try:
        thing = make()
    except errors.OutOfMemoryError as exc:
        message = str(exc)
        wanted = ("CUDA_ERROR_OUT_OF_MEMORY", f"asked for {nbytes} bytes on device {device.ordinal}", "bytes are free")
        clear = all(w in message for w in wanted)
        return dict(what=what, raised="OutOfMemoryError", message=message, clear=clear, ok=clear)
    except Exception as exc:  # noqa: BLE001 - the wrong exception is the finding
        return dict(what=what, raised=type(exc).__name__, message=str(exc), clear=False, ok=False)
    thing.close()
    return dict(what=what, raised=None, message="no exception: the allocation succeeded", clear=False, ok=False)


def _attempt(fn) -> str:
    try:
        return "ok" if fn() else "ran, but the output differs from the twin"
    except Exception as exc:  # noqa: BLE001 - recorded: the process must survive whatever happens
        return f"{type(exc).__name__}: {exc}"


def out_of_memory_phase(device, rng, exhaust: bool) -> dict:
    free, total = device.mem_info()
    nbytes = (free + GiB) // 2 * 2  # even: Tensor.empty asks for whole bf16 elements
    checks = [_expect_oom("DeviceBuffer(free + 1 GiB)", lambda: driver.DeviceBuffer(nbytes), nbytes, device),
              _expect_oom("Tensor.empty(free + 1 GiB)", lambda: pyrms.Tensor.empty((nbytes // 2,), DT), nbytes, device)]
    ops = Operands(LAUNCHES, rng)  # a normal allocation and launch right after
    ops.launch(None)
    after_oom = ops.correct()
    result = dict(phase="out of memory", free_before=free, total=total, asked=nbytes, checks=checks,
                  allocation_and_launch_after=after_oom)
    line = (f"out of memory: asking for {nbytes} bytes with {free} free raised "
            f"{checks[0]['raised']} ('{checks[0]['message']}'); Tensor.empty: {checks[1]['raised']}; "
            f"then allocation + launch: {'ok' if after_oom else 'FAILED'}")
    ok = all(c["ok"] for c in checks) and after_oom
    if exhaust:
        other = Operands(EXHAUSTED, rng)  # its memory now; its kernel is loaded only when memory is full
        held, size, start = [], GiB, time.perf_counter()
        while size >= 2 * MiB and len(held) < 4096:
            try:
                held.append(driver.DeviceBuffer(size))
            except errors.OutOfMemoryError:
                size //= 2
        exhausted_free = device.mem_info()[0]
        loaded_kernel = _attempt(lambda: (ops.poison(), ops.launch(None), ops.correct())[-1])
        new_kernel = _attempt(other.run)
        held_bytes = sum(b.nbytes for b in held)
        for b in held:
            b.close()
        held.clear()
        restored_free = device.mem_info()[0]
        ops.poison()
        ops.launch(None)
        launches_after = ops.correct()
        other_after = other.run()
        other.close()
        result.update(exhaust=dict(held_bytes=held_bytes, free_when_exhausted=exhausted_free,
                                   seconds=round(time.perf_counter() - start, 2),
                                   loaded_kernel_while_exhausted=loaded_kernel, new_kernel_while_exhausted=new_kernel,
                                   free_after_release=restored_free, **{f"{LAUNCHES.op}_after": launches_after,
                                                                        f"{EXHAUSTED.op}_after": other_after}))
        ok = ok and launches_after and other_after
        line += (f"; memory filled ({held_bytes / GiB:.1f} GiB held, {exhausted_free / MiB:.1f} MiB left): loaded "
                 f"kernel: {loaded_kernel}; kernel not yet loaded: {new_kernel}; after freeing: {LAUNCHES.op} "
                 f"{'ok' if launches_after else 'FAILED'}, {EXHAUSTED.op} {'ok' if other_after else 'FAILED'}")
    ops.close()
    result["ok"] = ok
    print(line + f" -> {'ok' if ok else 'FAIL'}", flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--quick", action="store_true", help="10,000 launches and 1,000 cycles")
    parser.add_argument("--launches", type=int, help="default 100,000 (--quick 10,000)")
    parser.add_argument("--cycles", type=int, help="allocate/free cycles, default 10,000 (--quick 1,000)")
    parser.add_argument("--streams", type=int, help="short-lived streams, default 1,000 (--quick 100)")
    parser.add_argument("--no-streams", action="store_true", help="skip the short-lived streams phase")
    parser.add_argument("--no-exhaust", action="store_true", help="do not fill device memory")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    launches = args.launches or (10_000 if args.quick else 100_000)
    cycles = args.cycles or (1_000 if args.quick else 10_000)
    streams = args.streams or (100 if args.quick else 1_000)
    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"soak: no CUDA GPU available: {reason}", file=sys.stderr)
        return 2
    device = driver.current_device()
    rng = np.random.default_rng(5)
    start = time.time()
    phases = [launches_phase(device, launches, rng), allocations_phase(device, cycles)]
    if not args.no_streams:
        phases.append(streams_phase(device, streams, rng))
    phases.append(out_of_memory_phase(device, rng, not args.no_exhaust))
    ok = all(p["ok"] for p in phases)
    summary = dict(tool="tools/soak.py", argv=sys.argv[1:], device=device.name, pyrms=pyrms.__version__,
                   device_bound=DEVICE_BOUND, rss_bound=RSS_BOUND, seconds=round(time.time() - start, 2),
                   phases=phases, ok=ok)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    a, b, oom = phases[0], phases[1], phases[-1]
    churn = "" if args.no_streams else (
        f", {streams} short-lived streams (device {mib(-phases[2]['device_drop'])}, RSS "
        f"{mib(phases[2]['rss_growth'])}{'' if phases[2]['ok'] else ': FAIL'})")
    print(f"soak: {'PASS' if ok else 'FAIL'}: {launches} launches (device {mib(-a['device_drop'])}, RSS "
          f"{mib(a['rss_growth'])}{'' if a['ok'] else ': FAIL'}), {cycles} allocate/free cycles (device "
          f"{mib(-b['device_drop'])}, RSS {mib(b['rss_growth'])}{'' if b['ok'] else ': FAIL'}){churn}; bounds: device "
          f"-{DEVICE_BOUND // MiB} MiB, RSS +{RSS_BOUND // MiB} MiB per phase; out of memory: "
          f"{oom['checks'][0]['raised']}, runtime usable after: {'yes' if oom['ok'] else 'NO'} ({time.time() - start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

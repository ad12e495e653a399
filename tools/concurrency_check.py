#!/usr/bin/env python3
"""Threads launching pyrms ops at once give the bits of a single-threaded run.

Three phases, each run twice on the same inputs into separate, poisoned (0xFF) output buffers: once
by THREADS threads started together (each with its own pyrms.Stream, created in the thread, or all
on one shared stream), once by the main thread alone on one stream, in order. The two sets of output
buffers must be bytewise equal, whole (rows, gaps and unused slots); every 37th launch is also
compared with the numpy twin, its slot whole (rows bit for bit, the rest still poison).

  rms_norm           THREADS x LAUNCHES launches, each into its own output slot; every launch at its
                     own row count (1-4), pointer misalignments, epsilon, strided rows, plain or
                     Gemma/round-once; even threads call with raw stream handles (the raw-pointer fast
                     path), odd threads with the Stream object (the general path).
  rms_norm_backward  the same with the backward pass (1-33 rows: one to three 16-row chunks of the
                     dweight sum), each thread on its own stream, each call with its own stream-ordered workspace.
  shared stream      rms_norm_backward again, all threads queueing on ONE stream: each launch pair must
                     stay with its own workspace while the threads' calls interleave on the stream.

    python -m tools.concurrency_check [--quick] [--threads 8] [--launches 1000] [--out FILE.json]

--quick: 100 launches per thread. Prints one line per phase, then "concurrency_check: PASS|FAIL ..."
last; exit status 1 on any difference or error.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import pyrms
from pyrms import driver, dtypes, plan, reference
from pyrms.testing import bits

DT = dtypes.BFLOAT16
POISON = 0xFF
SPOT_EVERY = 37


@dataclass
class Buffer:
    """Device memory mirrored by a host array of elements (for uploads and downloads)."""

    host: np.ndarray
    device: driver.DeviceBuffer = field(init=False)

    def __post_init__(self):
        self.device = driver.DeviceBuffer(self.host.nbytes)
        driver.memcpy_htod(self.device.ptr, self.host)

    def ptr(self, element: int) -> int:
        return self.device.ptr + element * self.host.dtype.itemsize

    def download(self) -> np.ndarray:
        out = np.empty_like(self.host)
        driver.memcpy_dtoh(out, self.device.ptr)
        return out

    def close(self) -> None:
        self.device.close()


def poisoned(elements: int) -> Buffer:
    return Buffer(np.full(elements * DT.itemsize, POISON, np.uint8).view(DT.numpy))


# --- the two workloads: every launch's arguments, as a pure function of (thread, index) --------------


class RmsNormWork:
    name = "rms_norm"
    hidden = 4099
    max_rows = 4

    def __init__(self, thread: int, launches: int, rng):
        h = self.hidden
        self.thread, self.launches = thread, launches
        self.in_stride = h + 5 + thread
        self.out_stride = h + 3
        self.slot = self.max_rows * self.out_stride + 8
        self.x = Buffer(rng.uniform(-2, 2, (12 + self.max_rows) * self.in_stride).astype(DT.numpy))
        self.w = Buffer(rng.uniform(-1, 1, h + 8).astype(DT.numpy))

    def output_elements(self) -> int:
        return self.launches * self.slot

    def spec(self, i: int) -> dict:
        return dict(rows=1 + i % self.max_rows, x_off=(i % 12) * self.in_stride + i % 3, w_off=i % 5,
                    out_off=i * self.slot + i % 8, epsilon=1e-6 * (1 + i % 7), gemma=i % 2 == 1)

    def launch(self, i: int, outputs: list[Buffer], stream) -> None:
        s = self.spec(i)
        pyrms.rms_norm(outputs[0].ptr(s["out_off"]), self.x.ptr(s["x_off"]), self.w.ptr(s["w_off"]), s["epsilon"],
                       s["rows"], self.hidden, dtype=DT, input_stride=self.in_stride, out_stride=self.out_stride,
                       gemma=s["gemma"], round_once=s["gemma"], stream=stream)

    def expected_slots(self, i: int) -> list[tuple[int, int, np.ndarray]]:
        """(buffer index, first element, expected elements) of launch i's output slot, whole."""
        s, h = self.spec(i), self.hidden
        rows = [s["x_off"] + r * self.in_stride for r in range(s["rows"])]
        x = np.stack([self.x.host[start:start + h] for start in rows])
        block = plan.plan_rms_norm(DT, h, gemma=s["gemma"], round_once=s["gemma"]).block
        y = reference.rms_norm_twin(x, self.w.host[s["w_off"]:s["w_off"] + h], s["epsilon"], block=block,
                                    row_phases=[start % DT.vec_elems for start in rows], gemma=s["gemma"],
                                    round_once=s["gemma"])
        start = i * self.slot
        slot = poisoned_host(self.slot)
        for r in range(s["rows"]):
            at = s["out_off"] - start + r * self.out_stride
            slot[at:at + h] = y[r]
        return [(0, start, slot)]

    def close(self):
        self.x.close()
        self.w.close()


class BackwardWork:
    name = "rms_norm_backward"
    hidden = 1027
    max_rows = 33

    def __init__(self, thread: int, launches: int, rng):
        h = self.hidden
        self.thread, self.launches = thread, launches
        self.stride = h + 3 + thread
        self.gi_stride = h + 1
        self.gi_slot = self.max_rows * self.gi_stride + 8
        self.gw_slot = h + 8
        size = (self.max_rows + 1) * self.stride
        self.dy = Buffer(rng.uniform(-1, 1, size).astype(DT.numpy))
        self.x = Buffer(rng.uniform(-2, 2, size).astype(DT.numpy))
        self.w = Buffer(rng.uniform(-1, 1, h + 8).astype(DT.numpy))
        self.plan = plan.plan_norm_backward(DT, h)

    def output_elements(self) -> tuple[int, int]:
        return self.launches * self.gi_slot, self.launches * self.gw_slot

    def spec(self, i: int) -> dict:
        return dict(rows=1 + i % self.max_rows, x_off=i % 8, dy_off=i % 5, w_off=i % 3,
                    gi_off=i * self.gi_slot + i % 8, gw_off=i * self.gw_slot + i % 4, epsilon=1e-6 * (1 + i % 7))

    def launch(self, i: int, outputs: list[Buffer], stream) -> None:
        s = self.spec(i)
        pyrms.rms_norm_backward(outputs[0].ptr(s["gi_off"]), outputs[1].ptr(s["gw_off"]), self.dy.ptr(s["dy_off"]),
                                self.x.ptr(s["x_off"]), self.w.ptr(s["w_off"]), s["epsilon"], s["rows"], self.hidden,
                                dtype=DT, grad_output_stride=self.stride, input_stride=self.stride,
                                grad_input_stride=self.gi_stride, stream=stream)

    def expected_slots(self, i: int):
        s, h, p = self.spec(i), self.hidden, self.plan
        x_rows = [s["x_off"] + r * self.stride for r in range(s["rows"])]
        dy_rows = [s["dy_off"] + r * self.stride for r in range(s["rows"])]
        x = np.stack([self.x.host[a:a + h] for a in x_rows])
        dy = np.stack([self.dy.host[a:a + h] for a in dy_rows])
        dx, dw = reference.norm_backward_twin(
            dy, x, self.w.host[s["w_off"]:s["w_off"] + h], s["epsilon"], block=p.block, fold=p.stats_fold,
            x_phases=[a % DT.vec_elems for a in x_rows], weight_phase=s["w_off"] % DT.vec_elems,
            chunk_rows=p.chunk_rows, grad_dtype=p.grad_dtype)
        gi = poisoned_host(self.gi_slot)
        for r in range(s["rows"]):
            at = s["gi_off"] - i * self.gi_slot + r * self.gi_stride
            gi[at:at + h] = dx[r]
        gw = poisoned_host(self.gw_slot)
        at = s["gw_off"] - i * self.gw_slot
        gw[at:at + h] = dw
        return [(0, i * self.gi_slot, gi), (1, i * self.gw_slot, gw)]

    def close(self):
        for b in (self.dy, self.x, self.w):
            b.close()


def poisoned_host(elements: int) -> np.ndarray:
    return np.full(elements * DT.itemsize, POISON, np.uint8).view(DT.numpy)


def output_buffers(work) -> list[Buffer]:
    sizes = work.output_elements()
    return [poisoned(n) for n in (sizes if isinstance(sizes, tuple) else (sizes,))]


# --- running ---------------------------------------------------------------------------------------


def run_threads(works, outputs, shared_stream: bool) -> tuple[float, list[str]]:
    """Every work in its own thread, started together; each on its own new Stream unless shared."""
    errors: list[str] = []
    barrier = threading.Barrier(len(works) + 1)
    shared = pyrms.Stream() if shared_stream else None
    streams = [] if shared is None else [shared]

    def worker(t: int) -> None:
        try:
            stream = shared if shared_stream else pyrms.Stream()
            if not shared_stream:
                streams.append(stream)
            # Even threads pass the raw handle (rms_norm's fast path), odd ones the Stream object.
            arg = stream.handle if t % 2 == 0 else stream
            barrier.wait()
            for i in range(works[t].launches):
                works[t].launch(i, outputs[t], arg)
            stream.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported, and the phase fails
            errors.append(f"thread {t}: {type(exc).__name__}: {exc}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(works))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: interleave launches as much as the GIL allows
    try:
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start
    finally:
        sys.setswitchinterval(interval)
    close_streams(streams)
    return seconds, errors


def close_streams(streams) -> None:
    for stream in streams:
        stream.synchronize()
        stream.close()


def run_serial(works, outputs) -> float:
    stream = pyrms.Stream()
    start = time.perf_counter()
    for t, work in enumerate(works):
        for i in range(work.launches):
            work.launch(i, outputs[t], stream)
    stream.synchronize()
    seconds = time.perf_counter() - start
    close_streams([stream])
    return seconds


def phase(label: str, kind, threads: int, launches: int, shared_stream: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    works = [kind(t, launches, rng) for t in range(threads)]
    concurrent = [output_buffers(w) for w in works]
    serial = [output_buffers(w) for w in works]
    try:
        seconds, errors = run_threads(works, concurrent, shared_stream)
        serial_seconds = run_serial(works, serial) if not errors else 0.0
        differing, spots, spot_failures = [], 0, []
        if not errors:
            for t in range(threads):
                got = [b.download() for b in concurrent[t]]
                want = [b.download() for b in serial[t]]
                for k, (a, b) in enumerate(zip(got, want)):
                    if not np.array_equal(bits(a), bits(b)):
                        where = np.flatnonzero(bits(a) != bits(b))
                        differing.append(f"thread {t} buffer {k}: {where.size} elements differ, first at {where[:3]}")
                for i in range(0, launches, SPOT_EVERY):
                    spots += 1
                    for k, start, expected in works[t].expected_slots(i):
                        slot = got[k][start:start + expected.size]
                        if not np.array_equal(bits(slot), bits(expected)):
                            where = np.flatnonzero(bits(slot) != bits(expected))
                            spot_failures.append(f"thread {t} launch {i} buffer {k}: {where.size} elements differ "
                                                 f"from the twin, first at slot element {where[:3]}")
    finally:
        for w, a, b in zip(works, concurrent, serial):
            w.close()
            for buf in a + b:
                buf.close()
    total = threads * launches
    ok = not (errors or differing or spot_failures)
    result = dict(phase=label, op=kind.name, threads=threads, launches_per_thread=launches, launches=total,
                  streams=1 if shared_stream else threads, seconds=round(seconds, 4),
                  launches_per_second=round(total / seconds) if seconds else None,
                  serial_seconds=round(serial_seconds, 4), bitwise_equal_to_serial=not differing and not errors,
                  twin_spot_checks=spots, twin_spot_failures=len(spot_failures), errors=errors,
                  differences=differing[:10] + spot_failures[:10], ok=ok)
    streams = "one shared stream" if shared_stream else f"{threads} streams"
    print(f"{label}: {threads} threads x {launches} {kind.name} launches on {streams} in {seconds:.2f} s "
          f"({total / seconds if seconds else 0:,.0f}/s; single thread {serial_seconds:.2f} s): "
          f"bitwise equal to the single-threaded run: {'yes' if result['bitwise_equal_to_serial'] else 'NO'}; "
          f"{spots - len(spot_failures)}/{spots} slots equal to the twin", flush=True)
    for line in errors + differing[:5] + spot_failures[:5]:
        print(f"  {line}")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--quick", action="store_true", help="100 launches per thread")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--launches", type=int, help="launches per thread (default 1000, --quick 100)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    launches = args.launches or (100 if args.quick else 1000)
    if args.threads < 1 or launches < 1:
        parser.error("--threads and --launches must be >= 1")
    reason = driver.unavailable_reason()
    if reason is not None:
        print(f"concurrency_check: no CUDA GPU available: {reason}", file=sys.stderr)
        return 2
    device = driver.current_device()
    start = time.time()
    # Compile and load every kernel first: the phases time launches, not NVRTC.
    warm = [phase("warm-up", RmsNormWork, 1, 2, False, 0), phase("warm-up", BackwardWork, 1, 2, False, 0)]
    results = [phase("rms_norm", RmsNormWork, args.threads, launches, False, 1),
               phase("rms_norm_backward", BackwardWork, args.threads, launches, False, 2),
               phase("shared stream", BackwardWork, args.threads, launches, True, 3)]
    ok = all(r["ok"] for r in warm + results)
    summary = dict(tool="tools/concurrency_check.py", argv=sys.argv[1:], device=device.name, pyrms=pyrms.__version__,
                   seconds=round(time.time() - start, 2), phases=results, ok=ok)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    launched = sum(r["launches"] for r in results)
    print(f"concurrency_check: {'PASS' if ok else 'FAIL'}: {len(results)} phases, {launched} launches from "
          f"{args.threads} threads, every output bitwise equal to the single-threaded run: "
          f"{'yes' if all(r['bitwise_equal_to_serial'] for r in results) else 'NO'}, "
          f"{sum(r['twin_spot_checks'] - r['twin_spot_failures'] for r in results)}/"
          f"{sum(r['twin_spot_checks'] for r in results)} spot checks equal to the twin ({time.time() - start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

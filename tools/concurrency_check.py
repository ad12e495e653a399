#!/usr/bin/env python3
"""Threads launching pyrms ops at once give the bits of a single-threaded run.

A phase per op of the case matrix's concurrency cases (tests.support.case_matrix.concurrency_ops():
the RMSNorm forward and backward), then a shared-stream phase per backward among them, each run twice on
the same inputs into separate, poisoned (0xFF) output buffers: once by THREADS threads started together
(each with its own pyrms.Stream, created in the thread, or all on one shared stream), once by the main
thread alone on one stream, in order. The two sets of output buffers must be bytewise equal, whole (rows,
gaps and unused slots); every 37th launch is also compared with the numpy twin, its slot whole (rows bit
for bit, the rest still poison). Operands are tests.support.testing's guarded allocations (flat, slots
inside), and launch i of thread t is the case tests.support.case_matrix.concurrency(op)[(i + 7 t) % N]: its
rows, each pointer's offset past a 16-byte boundary, its strides and options, launched on raw pointers
through tests.support.raw_calls.

  <op>               THREADS x LAUNCHES launches, each into its own output slot; every launch at its
                     own row count (the forward 1-4 rows; the backward 1-33: one to three 16-row chunks
                     of the dweight sum), pointer misalignments, epsilon, strided rows, options (the
                     forward plain or Gemma/round-once); even threads call with raw stream handles (the
                     fast path), odd threads with the Stream object; each backward call with its own
                     stream-ordered workspace.
  shared stream      a backward again, all threads queueing on ONE stream: each launch pair must
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
from pathlib import Path

import numpy as np

import pyrms
from pyrms import driver, dtypes
from tests.support import case_matrix, raw_calls
from tests.support.testing import Rows, allocate, bits

DT = dtypes.BFLOAT16
SPOT_EVERY = 37
BLOCK = 8  # elements of a 16-byte bf16 vector: slots start on a boundary, a case's offset moves off it


def _round_up(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def at(operand: Rows, element: int) -> int:
    """The device address of a flat guarded operand's element."""
    return operand.ptr + element * DT.itemsize


# --- the two workloads: launch i of a thread is case_matrix.concurrency(op)[(i + 7 * thread) % N] ----------


class Work:
    """One thread's operands and launches: every launch reads its rows from one of SOURCES blocks of
    shared flat inputs and writes its own slot of flat poisoned outputs, each pointer at its case's
    offset past a 16-byte boundary."""

    SOURCES = 12  # input blocks: launches read overlapping inputs, never one another's outputs

    def __init__(self, op: str, thread: int, launches: int, rng):
        self.op, self.thread, self.launches = op, thread, launches
        self.cases = case_matrix.concurrency(op)
        self.hidden = h = self.cases[0].hidden  # one hidden size per op
        span = max(c.rows * (max((s for _, s in c.strides), default=h)) for c in self.cases)
        self.block = _round_up(span + BLOCK)  # one launch's rows, at any offset
        rows, vectors = case_matrix.operands(op)
        written = raw_calls.outputs(op)
        self.vectors = vectors
        self.inputs = {name: allocate(rng, DT, 1, self.SOURCES * self.block, low=-1.0 if name != "input" else -2.0,
                                      high=1.0 if name != "input" else 2.0) for name in rows if name not in written}
        self.inputs.update({name: allocate(rng, DT, 1, h + BLOCK, low=-1.0, high=1.0)
                            for name in vectors if name not in written})
        self.slots = {name: _round_up(h + BLOCK) if name in vectors else self.block for name in written}

    def case(self, i: int) -> case_matrix.Case:
        return self.cases[(i + 7 * self.thread) % len(self.cases)]

    def outputs(self) -> dict[str, Rows]:
        """Fresh poisoned output operands for every launch's slot."""
        return {name: allocate(None, DT, 1, self.launches * slot, poison=True) for name, slot in self.slots.items()}

    def _start(self, name: str, i: int) -> int:
        """Element where launch i's `name` operand starts, inside its input block or output slot."""
        c = self.case(i)
        if name in self.slots:
            return i * self.slots[name] + c.offset(name)
        return (0 if name in self.vectors else (i % self.SOURCES) * self.block) + c.offset(name)

    def launch(self, i: int, outputs: dict[str, Rows], stream) -> None:
        ptr = {name: at(op, self._start(name, i)) for name, op in {**self.inputs, **outputs}.items()}
        raw_calls.launch(self.case(i), ptr, stream)

    def _rows(self, name: str, i: int) -> tuple[np.ndarray, list[int]]:
        """Launch i's [rows, hidden] values of input `name`, and each row's phase in its vector."""
        c, op = self.case(i), self.inputs[name]
        rows = 1 if name in self.vectors else c.rows
        starts = [op.offset + self._start(name, i) + r * (c.stride(name) or self.hidden) for r in range(rows)]
        return np.stack([op.host[a:a + self.hidden] for a in starts]), [a % BLOCK for a in starts]

    def expected_slots(self, i: int) -> list[tuple[str, int, np.ndarray]]:
        """(output name, first element, expected elements) of launch i's slots, whole."""
        c, h = self.case(i), self.hidden
        read = {name: self._rows(name, i) for name in self.inputs}
        phases = {name: p if name not in self.vectors else p[0] for name, (_, p) in read.items()}
        rows = raw_calls.twin(c, {name: v for name, (v, _) in read.items()}, phases)
        slots = []
        for name, values in rows.items():
            slot = np.full(self.slots[name] * DT.itemsize, 0xFF, np.uint8).view(DT.numpy)
            for r, row in enumerate(values):
                start = c.offset(name) + r * (c.stride(name) or h)
                slot[start:start + h] = row
            slots.append((name, i * self.slots[name], slot))
        return slots

    def close(self):
        for op in self.inputs.values():
            op.close()


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
            # Even threads pass the raw handle (the fast path), odd ones the Stream object.
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


def phase(label: str, op: str, threads: int, launches: int, shared_stream: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    works = [Work(op, t, launches, rng) for t in range(threads)]
    concurrent = [w.outputs() for w in works]
    serial = [w.outputs() for w in works]
    try:
        seconds, errors = run_threads(works, concurrent, shared_stream)
        serial_seconds = run_serial(works, serial) if not errors else 0.0
        differing, spots, spot_failures = [], 0, []
        if not errors:
            for t in range(threads):
                # Whole allocations, guards included: a write outside any slot shows up too.
                got = {name: b.download() for name, b in concurrent[t].items()}
                want = {name: b.download() for name, b in serial[t].items()}
                for name in got:
                    if not np.array_equal(bits(got[name]), bits(want[name])):
                        where = np.flatnonzero(bits(got[name]) != bits(want[name]))
                        differing.append(f"thread {t} {name}: {where.size} elements differ, first at {where[:3]}")
                for i in range(0, launches, SPOT_EVERY):
                    spots += 1
                    for name, start, expected in works[t].expected_slots(i):
                        first = concurrent[t][name].offset + start
                        slot = got[name][first:first + expected.size]
                        if not np.array_equal(bits(slot), bits(expected)):
                            where = np.flatnonzero(bits(slot) != bits(expected))
                            spot_failures.append(f"thread {t} launch {i} ({works[t].case(i)}) {name}: {where.size} "
                                                 f"elements differ from the twin, first at slot element {where[:3]}")
    finally:
        for w, a, b in zip(works, concurrent, serial):
            w.close()
            for buf in (*a.values(), *b.values()):
                buf.close()
    total = threads * launches
    ok = not (errors or differing or spot_failures)
    result = dict(phase=label, op=op, threads=threads, launches_per_thread=launches, launches=total,
                  streams=1 if shared_stream else threads, seconds=round(seconds, 4),
                  launches_per_second=round(total / seconds) if seconds else None,
                  serial_seconds=round(serial_seconds, 4), bitwise_equal_to_serial=not differing and not errors,
                  twin_spot_checks=spots, twin_spot_failures=len(spot_failures), errors=errors,
                  differences=differing[:10] + spot_failures[:10], ok=ok)
    streams = "one shared stream" if shared_stream else f"{threads} streams"
    print(f"{label}: {threads} threads x {launches} {op} launches on {streams} in {seconds:.2f} s "
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
    # The ops are the case matrix's (concurrency_ops): each on its own streams, then the backward on one.
    ops = case_matrix.concurrency_ops()
    warm = [phase("warm-up", op, 1, 2, False, 0) for op in ops]
    results = [phase(op, op, args.threads, launches, False, seed) for seed, op in enumerate(ops, 1)]
    results += [phase("shared stream", op, args.threads, launches, True, len(ops) + 1)
                for op in ops if op in case_matrix.BACKWARD]
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

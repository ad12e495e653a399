"""The launch floor: the least device time a launch costs, measured in the same run as the kernels.

Two kernels that do almost nothing, both PDL-aware (from sm_90, ``griddepcontrol.wait`` before the
first global read and ``griddepcontrol.launch_dependents`` right after it):
  empty  one block of 32 threads: the launch itself;
  copy   one block copying one bf16 row of ``hidden`` elements, 16 bytes per thread (hidden/8
         threads, at most 1024, which then loop): the least a one-row kernel such as decode RMSNorm
         can cost. Its rows rotate over the same sets as the headline op's at 1 x hidden in the sweep, so it
         reads from DRAM as pyrms does there, and its output is checked bit for bit before timing.
Each is timed four ways: back to back on the benchmark's stream (EventTimer behind the spin kernel,
as the sweep times every implementation: device µs per launch), and as N launches captured into a
CUDA graph on a pyrms Stream and replayed on the benchmark's stream behind the spin (µs per replay
/ N, N covering every rotation set); each without and with PDL.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import numpy as np

from .. import compiler, driver, launch
from . import timing
from .config import Config, Shape
from .ops import Bench
from .problem import Problem
from .results import FAILED, OK, SKIPPED, Timed

EMPTY, COPY = "empty", "copy"
BACK_TO_BACK, GRAPH = "back to back", "graph"
METHODS = ((BACK_TO_BACK, False), (BACK_TO_BACK, True), (GRAPH, False), (GRAPH, True))
EMPTY_THREADS = 32
VECTOR_ELEMENTS = 8        # bf16 elements in one 16-byte vector
MAX_THREADS = 1024
BATCH = 100                # launches per back-to-back sample (as stats.batch_size gives tiny kernels)
GRAPH_MIN_LAUNCHES = 256   # nodes of a graph, at least (more where there are more rotation sets)

EMPTY_NAME, COPY_NAME = "pyrms_floor_empty", "pyrms_floor_copy_row"
COPY_SIGNATURE = ("ptr", "ptr", "i32")
FLOOR_SOURCE = r"""
// The launch floor's kernels (pyrms/bench/floor.py). From sm_90, griddepcontrol.wait holds a kernel
// until the one before it on the stream has completed and its writes are visible (at once when it was
// not launched with programmatic dependent launch), and launch_dependents lets the next one launch.
extern "C" __global__ void pyrms_floor_empty() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// One block copies one row of `vectors` 16-byte vectors; launched with at most `vectors` threads,
// each copies its vector and then every blockDim.x-th one after it.
extern "C" __global__ void pyrms_floor_copy_row(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                                int vectors) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const uint4 first = src[threadIdx.x];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    dst[threadIdx.x] = first;
    for (int i = threadIdx.x + blockDim.x; i < vectors; i += blockDim.x) {
        dst[i] = src[i];
    }
}
"""
# The copy's memory: an x read and a y written at one token, as the headline op's, so the same rotation sets
# (the weight goes unused).
COPY_ROW = Bench("copy_row", inputs=("x",), outputs=("y",), row_terms=2, results=("y",),
                 formula="read x + write y = 2·H elements")


def compile_floor(arch: str) -> bytes:
    """CUBIN of both floor kernels for ``arch`` (e.g. 'sm_90'): NVRTC, no headers."""
    return compiler.compile_text("pyrms_bench_floor.cu", FLOOR_SOURCE, arch=arch).cubin


def copy_threads(hidden: int) -> int:
    """Threads of the one-row copy of ``hidden`` bf16 elements: one per 16-byte vector, at most 1024.
    ValueError unless the row is a whole number of vectors."""
    if hidden < 1 or hidden % VECTOR_ELEMENTS:
        raise ValueError(f"a bf16 row of {hidden} elements is not a whole number of 16-byte vectors")
    return min(hidden // VECTOR_ELEMENTS, MAX_THREADS)


@dataclass
class Floor(Timed):
    """One kernel timed one way: per-launch device times over rounds of samples."""

    kernel: str                 # EMPTY | COPY
    hidden: int | None          # the copied row's bf16 elements; None for the empty kernel
    method: str                 # BACK_TO_BACK | GRAPH
    pdl: bool
    threads: int = 0
    launches: int = 0           # per sample: the batch (back to back) or the graph's N
    sets: int = 1               # rotation sets
    rounds: list = field(default_factory=list)
    host_bound: int = 0         # samples redone because the host had not queued in time
    status: str = OK
    reason: str = ""
    notes: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return EMPTY if self.kernel == EMPTY else f"{COPY} {self.hidden}"

    def to_dict(self) -> dict:
        out = {"kernel": self.kernel, "hidden": self.hidden, "method": self.method, "pdl": self.pdl,
               "threads": self.threads, "launches_per_sample": self.launches, "rotation_sets": self.sets,
               "status": self.status, "reason": self.reason, "host_bound_samples_redone": self.host_bound,
               "samples_us_per_round": self.rounds, "notes": self.notes}
        s = self.summary
        if s is not None:
            out.update(median_us=s.median, p10_us=s.p10, p90_us=s.p90, spread=s.spread)
        return out


def find(floors, kernel: str, hidden: int | None, method: str, pdl: bool, ok_only: bool = True) -> Floor | None:
    """The floor of that kernel, row size and way (only if timed, unless ``ok_only`` is False), or None."""
    for f in floors or ():
        if (f.kernel, f.hidden, f.method, f.pdl) == (kernel, hidden, method, pdl):
            return f if f.median_us is not None or not ok_only else None
    return None


def copy_floor(floors, hidden: int, pdl: bool, ok_only: bool = True) -> Floor | None:
    """What a decode launch of ``hidden`` is compared with: the one-row copy back to back (as the sweep
    times), with or without PDL."""
    return find(floors, COPY, hidden, BACK_TO_BACK, pdl, ok_only)


# -- measurement (GPU) ---------------------------------------------------------------------------


def measure(config: Config, timer: timing.EventTimer, device: driver.Device, rng, progress) -> list[Floor]:
    """Every floor of the run: the empty kernel, then the one-row copy at each of config.floor_hiddens().
    A failure is recorded in the floors it touches (status and reason), never raised."""
    subjects = [[Floor(EMPTY, None, m, pdl, EMPTY_THREADS) for m, pdl in METHODS]]
    subjects += [[Floor(COPY, hidden, m, pdl) for m, pdl in METHODS] for hidden in config.floor_hiddens()]
    try:
        module = launch.load_module(compile_floor(device.arch), device)
        kernels = {EMPTY: module.function(EMPTY_NAME, ()), COPY: module.function(COPY_NAME, COPY_SIGNATURE)}
        with driver.Stream(device) as capture_stream:
            for subject in subjects:
                try:
                    if subject[0].kernel == EMPTY:
                        _time(config, timer, capture_stream, kernels[EMPTY], [()], subject)
                    else:
                        _time_copy(config, timer, device, rng, capture_stream, kernels[COPY], subject)
                except Exception as exc:  # noqa: BLE001 - this kernel's floors fail with it, the others still run
                    _failed(subject, exc)
                progress(_progress_line(subject))
    except Exception as exc:  # noqa: BLE001 - no kernel or no stream: every floor fails with it
        for subject in subjects:
            if subject[0].status == OK and not subject[0].rounds:
                _failed(subject, exc)
    return [f for subject in subjects for f in subject]


def _failed(subject: list[Floor], exc: Exception) -> None:
    _give_up(subject, FAILED, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    subject[0].notes.append(traceback.format_exc())


def _time_copy(config, timer, device, rng, capture_stream, kernel, subject: list[Floor]) -> None:
    hidden = subject[0].hidden
    try:
        threads = copy_threads(hidden)
    except ValueError as exc:
        _give_up(subject, SKIPPED, str(exc))
        return
    with Problem(COPY_ROW, "bfloat16", Shape(1, hidden), device=device, rng=rng,
                 cap_bytes=int(config.memory_cap_gib * (1 << 30)), l2_factor=config.l2_factor) as p:
        for f in subject:
            f.threads, f.sets = threads, p.sets
        args = [(p.ptr("y", i), p.ptr("x", i), hidden // VECTOR_ELEMENTS) for i in range(p.sets)]
        for pdl in (False, True):
            if not _copies_exactly(p, kernel, threads, args[0], timer.stream, pdl):
                _give_up(subject, FAILED, f"validation: the one-row copy{' with PDL' if pdl else ''} did not "
                                          "reproduce its input bit for bit")
                return
        _time(config, timer, capture_stream, kernel, args, subject)


def _give_up(subject: list[Floor], status: str, reason: str) -> None:
    for f in subject:
        f.status, f.reason, f.rounds = status, reason, []


def _copies_exactly(p: Problem, kernel, threads: int, args, stream: int, pdl: bool) -> bool:
    p.reset_set0()
    kernel.launch(1, threads, args, stream, pdl=pdl)
    driver.synchronize()
    return bool(np.array_equal(p.download_rows(p.ptr("y", 0)).view(np.uint16), p.host["x"].view(np.uint16)))


def _time(config: Config, timer: timing.EventTimer, capture_stream: driver.Stream, kernel, args: list,
          subject: list[Floor]) -> None:
    """Fill ``subject`` (the four ways of one kernel) with config.rounds rounds of config.reps samples,
    the four interleaved in each round, as the sweep interleaves implementations."""
    stream, sets = timer.stream, len(args)
    threads = subject[0].threads
    batch = config.batch or BATCH
    graph_launches = max(GRAPH_MIN_LAUNCHES, sets)
    graphs = {}
    try:
        samplers = []
        for f in subject:
            if f.method == BACK_TO_BACK:
                def run(i, pdl=f.pdl):
                    kernel.launch(1, threads, args[i], stream, pdl=pdl)

                f.launches = batch
                samplers.append(_sampler(timer, run, sets, batch, 1))
            else:
                graph = graphs[f.pdl] = _captured(capture_stream, kernel, threads, args, graph_launches, f.pdl)
                graph.launch(stream)  # instantiates, outside the timing
                driver.synchronize()
                f.launches = graph_launches
                samplers.append(_sampler(timer, lambda _i, g=graph: g.launch(stream), 1, 1, graph_launches))
        for _ in range(config.rounds):
            for f, (sample, _) in zip(subject, samplers):
                f.rounds.append(sample(config.reps))
        for f, (_, cursor) in zip(subject, samplers):
            f.host_bound = cursor.host_bound
    finally:
        for graph in graphs.values():
            graph.close()


def _sampler(timer: timing.EventTimer, run, sets: int, batch: int, launches_per_call: int):
    """A function of a sample count giving µs per launch, and its Cursor; warmed up here."""
    host_us = timer.warm_up(run, sets, 2 * batch)
    cursor = timing.Cursor(sets, batch, spin_us=timing.initial_spin_us(host_us, batch))
    return (lambda reps: [us / launches_per_call for us in timer.samples(run, cursor, reps)]), cursor


def _captured(capture_stream: driver.Stream, kernel, threads: int, args: list, count: int, pdl: bool) -> driver.Graph:
    """``count`` launches over the rotation sets in turn, captured into one graph."""
    with driver.capture(capture_stream) as graph:
        for i in range(count):
            kernel.launch(1, threads, args[i % len(args)], capture_stream, pdl=pdl)
    return graph


def _progress_line(subject: list[Floor]) -> str:
    parts = []
    for f in subject:
        how = f"{f.method}{' + PDL' if f.pdl else ''}"
        parts.append(f"{how} {f.median_us:.2f}us" if f.median_us is not None else f"{how} {f.status.upper()}")
    return f"[launch floor {subject[0].label}] " + ", ".join(parts)

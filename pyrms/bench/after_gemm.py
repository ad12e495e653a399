"""The norm where a model runs it: right after a GEMM that wrote its input, in a CUDA graph.

The sweep times a stream of the same norm, each launch behind another norm. In a model a norm follows a GEMM
(the attention's output projection, the MLP's down projection), and serving stacks replay a decode step as a
CUDA graph; what a norm costs there depends on the kernel ahead of it: its tail, and whether it lets the norm
start early (programmatic dependent launch only helps where the kernel ahead allows it).

For each (op, dtype, shape) of the run with at most ``Config.after_gemm_tokens`` tokens, and each
implementation: PAIRS pairs GEMM -> norm are captured into one CUDA graph, pair j a ``torch.matmul`` of its own
[T, K] and [K, H] operands in the op's dtype (K = H unless ``Config.gemm_k``) writing the op's first input of
rotation set j, then the implementation on set j, which reads what the GEMM just wrote. The same PAIRS GEMMs
alone are captured into a second graph, shared by the shape's implementations. Per norm: (a replay of the
first - a replay of the second) / PAIRS.

The graphs are captured on a stream of their own (every implementation is built to launch on it, and PyTorch's
current stream is it while they are built and captured) and replayed on the benchmark's stream, timed as the
sweep times launches (timing.EventTimer: a batch behind the spin kernel). One sample is a batch of replays of
one graph; the two graphs alternate sample by sample, the one first flipping from pair to pair, so that drift
lands on both alike; each round takes every implementation's pairs of samples in turn, as the sweep interleaves
implementations, so the spread over rounds is the run-to-run spread, as there.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
import traceback
from typing import Callable

from .. import dtypes
from . import impls as impls_mod
from . import ops as ops_mod
from . import sweep, timing, validate
from .config import AFTER_GEMM_PAIRS, Config, Shape
from .ops import Bench
from .problem import Problem
from .results import FAILED, OK, AfterGemm

PAIRS = AFTER_GEMM_PAIRS
TARGET_US = 1000.0      # device time of one sample
PROBE_REPLAYS = 3       # replays of the sample that sizes the others
MIN_REPLAYS, MAX_REPLAYS = 2, 100


def problems(config: Config) -> list[tuple[str, str, Shape]]:
    """The (op, dtype, shape) the section times: the run's, at most ``config.after_gemm_tokens`` tokens."""
    return [(op, dtype, shape) for op in config.ops for dtype in config.dtypes for shape in config.shapes_for(op)
            if shape.tokens <= config.after_gemm_tokens]


def gemm_output(op: Bench) -> str:
    """The array the GEMM writes: the first one the op reads (x, the input a model's GEMM produces)."""
    read = op.inputs + op.inplace
    if not read:
        raise ValueError(f"{op.name} reads no [tokens, hidden] array for a GEMM to write")
    return read[0]


def replays_per_sample(replay_us: float, target_us: float = TARGET_US, low: int = MIN_REPLAYS,
                       high: int = MAX_REPLAYS) -> int:
    """Replays of a graph per sample: enough that a sample lasts about ``target_us`` of device time."""
    if not replay_us > 0:
        return high
    return int(min(high, max(low, math.ceil(target_us / replay_us))))


def with_norms_first(pair: int) -> bool:
    """Whether the graph with the norms is sampled first in pair ``pair`` of samples (every other pair)."""
    return pair % 2 == 0


def per_norm_us(with_norms_us: float, gemms_only_us: float, pairs: int = PAIRS) -> float:
    """µs per norm from one replay of each graph."""
    return (with_norms_us - gemms_only_us) / pairs


def time_rounds(records: dict[str, AfterGemm], with_norms: dict[str, Callable[[], float]],
                gemms_only: Callable[[], float], rounds: int, reps: int) -> None:
    """Fill each record named in ``with_norms`` (a function giving one sample, µs per replay of its graph with
    the norms; ``gemms_only`` the same of the graph without) with ``rounds`` rounds of ``reps`` per-norm
    samples, and its GEMM's µs per GEMM sample for sample; the implementations in turn in each round. One
    that raises is failed with the reason, the others go on."""
    for _ in range(rounds):
        for name, sample in with_norms.items():
            rec = records[name]
            if rec.status != OK:
                continue
            norms, gemms = [], []
            try:
                for pair in range(reps):
                    if with_norms_first(pair):
                        with_us = sample()
                        without_us = gemms_only()
                    else:
                        without_us = gemms_only()
                        with_us = sample()
                    norms.append(per_norm_us(with_us, without_us, rec.pairs))
                    gemms.append(without_us / rec.pairs)
            except Exception as exc:
                rec.status, rec.reason = FAILED, f"timing: {sweep.one_line(exc)}"
                rec.notes.append(traceback.format_exc())
                continue
            rec.rounds.append(norms)
            rec.gemm_rounds.append(gemms)


def progress_line(records: list[AfterGemm], seconds: float) -> str:
    """One line per problem: the GEMM's µs, then each implementation's µs per norm, or its status."""
    r0 = records[0]
    gemm = next((r.gemm_summary.median for r in records if r.gemm_summary is not None), None)
    parts = [f"{r.impl} {r.median_us:.2f}us" if r.median_us is not None else f"{r.impl} {r.status.upper()}"
             for r in records]
    head = f"[after a GEMM {r0.op} {r0.dtype} {r0.tokens}x{r0.hidden}]" + (f" GEMM {gemm:.2f}us;" if gemm else "")
    return f"{head} " + ", ".join(parts) + f"  ({seconds:.1f} s)"


def measure(config: Config, ctx: impls_mod.Context, timer: timing.EventTimer, device, rng,
            progress) -> list[AfterGemm] | dict:
    """Every problem of ``problems(config)``: its records, or {"reason": why not} for the whole section."""
    todo = problems(config)
    torch = ctx.torch
    if todo and torch is None:
        return {"reason": f"it needs PyTorch (the GEMM, the graph capture): {ctx.torch_reason}"}
    records: list[AfterGemm] = []
    if not todo:
        return records
    side = torch.cuda.Stream(device=device.ordinal)
    # The implementations launch on the capture stream; the graphs are replayed on the benchmark's.
    own = dataclasses.replace(ctx, stream=int(side.cuda_stream), notes=[])
    for op_name, dtype, shape in todo:
        start = time.perf_counter()
        done = measure_problem(config, own, side, timer, device, rng, op_name, dtype, shape)
        records += done
        if done:
            progress(progress_line(done, time.perf_counter() - start))
    return records


class Gemms:
    """PAIRS GEMMs: GEMM j ``torch.matmul`` of its own A_j [T, K] (normal) and B_j [K, H] (normal / sqrt(K), so
    its output is about unit normal whatever K) writing the op's first input of rotation set j."""

    def __init__(self, torch, problem: Problem, k: int):
        self.torch = torch
        self.out = problem.torch_rows(torch, gemm_output(problem.op))
        like = dict(device=self.out[0].device, dtype=self.out[0].dtype)
        self.a = [torch.randn(problem.tokens, k, **like) for _ in self.out]
        self.b = [torch.randn(k, problem.hidden, **like) * k ** -0.5 for _ in self.out]

    def run(self, after_each: Callable[[int], object] | None = None) -> None:
        """Every GEMM in turn, ``after_each(j)`` after GEMM j."""
        for j, out in enumerate(self.out):
            self.torch.matmul(self.a[j], self.b[j], out=out)
            if after_each is not None:
                after_each(j)


def capture(torch, stream, fn: Callable[[], object]):
    """``fn()`` captured into a torch CUDA graph on ``stream`` (run once before, outside the graph: first calls
    compile, load and allocate). Thread-local capture mode, as pyrms.driver.capture's."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        fn()
    return graph


def sampler(timer: timing.EventTimer, graph) -> tuple[Callable[[], float], timing.Cursor]:
    """One sample of ``graph``'s replays on the timer's stream (µs per replay), with its Cursor: warmed up, and
    sized by a first sample of PROBE_REPLAYS replays."""
    def run(_i):
        graph.replay()

    host_us = timer.warm_up(run, 1, PROBE_REPLAYS)
    cursor = timing.Cursor(1, PROBE_REPLAYS, spin_us=timing.initial_spin_us(host_us, PROBE_REPLAYS))
    cursor.batch = replays_per_sample(timer.sample(run, cursor))
    cursor.spin_us = max(cursor.spin_us, timing.initial_spin_us(host_us, cursor.batch))
    return (lambda: timer.sample(run, cursor)), cursor


def measure_problem(config: Config, ctx: impls_mod.Context, side, timer: timing.EventTimer, device, rng,
                    op_name: str, dtype: str, shape: Shape) -> list[AfterGemm]:
    """One (op, dtype, shape): every implementation built to launch on ``side`` (ctx.stream is its handle),
    validated, captured after the GEMMs, and timed."""
    torch = ctx.torch
    op = ops_mod.get(op_name)
    k = config.gemm_k or shape.hidden
    nbytes = op.bytes_moved(shape.tokens, shape.hidden, dtypes.get(dtype).itemsize)
    records = {n: AfterGemm(op_name, dtype, shape.tokens, shape.hidden, n, nbytes, sets=PAIRS, pairs=PAIRS, k=k)
               for n in config.impls_for(op_name)}
    if not records:
        return []
    built: dict[str, impls_mod.Impl] = {}
    graphs: dict = {}
    problem = gemms = None
    try:
        problem = Problem(op, dtype, shape, device=device, rng=rng,
                          cap_bytes=int(config.memory_cap_gib * sweep.GIB), sets=PAIRS)
        expected = validate.Expected(problem, config.epsilon)
        ctx.compile_here = config.compile_at(op_name, shape)
        with torch.cuda.stream(side):
            built = sweep.build_checked(op_name, dtype, ctx, problem, expected, records)
            gemms = Gemms(torch, problem, k)
            graphs[None] = capture(torch, side, gemms.run)
            for name, impl in built.items():
                if records[name].status != OK:
                    continue
                try:
                    graphs[name] = capture(torch, side, lambda launch=impl.launch: gemms.run(launch))
                except Exception as exc:
                    _fail(records[name], "capture", exc)
        gemms_only, _ = sampler(timer, graphs[None])
        with_norms, cursors = {}, {}
        for name, graph in graphs.items():
            if name is None:
                continue
            try:
                with_norms[name], cursors[name] = sampler(timer, graph)
                records[name].batch = cursors[name].batch
            except Exception as exc:
                _fail(records[name], "warm-up", exc)
        time_rounds(records, with_norms, gemms_only, config.rounds, config.reps)
        for name, cursor in cursors.items():
            records[name].host_bound = cursor.host_bound
    except Exception as exc:  # the problem, the GEMMs or their graph: every implementation fails with it
        for rec in records.values():
            if rec.status == OK and not rec.rounds:
                _fail(rec, "problem setup", exc)
        print(f"pyrms.bench: after a GEMM, {op_name} {dtype} {shape}: {sweep.one_line(exc)}", file=sys.stderr)
    finally:
        for graph in graphs.values():  # before the memory its nodes use goes
            graph.reset()
        graphs.clear()
        gemms = None  # its operands, before empty_cache
        for impl in built.values():
            try:
                impl.close()
            except Exception:
                pass
        if problem is not None:
            torch.cuda.synchronize()
            problem.close()
        torch.cuda.empty_cache()
    return list(records.values())


def _fail(rec: AfterGemm, where: str, exc: Exception) -> None:
    rec.status, rec.reason = FAILED, f"{where}: {sweep.one_line(exc)}"
    rec.notes.append(traceback.format_exc())

"""The shape sweep: for each (op, dtype, shape), build every selected implementation, validate it,
warm it up, then time all of them in interleaved rounds (round 1: each implementation in turn, then
round 2, ...), so that drift during the run lands on all of them alike and the difference between
rounds measures the run-to-run spread."""
from __future__ import annotations

import sys
import time
import traceback

from .. import driver
from . import impls as impls_mod
from . import registry
from . import ops as ops_mod
from . import stats, timing, validate
from .config import Config, Shape
from .problem import Problem
from .results import FAILED, OK, SKIPPED, Record

GIB = 1 << 30


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a failed record's reason)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def build_checked(op_name: str, dtype: str, ctx: impls_mod.Context, problem: Problem, expected: validate.Expected,
                  records: dict[str, Record]) -> dict[str, impls_mod.Impl]:
    """Build each implementation named in ``records`` on ``problem`` and validate its output; its record takes
    the outcome (skipped when it cannot run, failed when it breaks or its output is wrong). Returns every Impl
    built, the failed ones too (the caller closes them all)."""
    built: dict[str, impls_mod.Impl] = {}
    for name, rec in records.items():
        rec.notes += expected.notes
        try:
            impl = registry.make(op_name, name, ctx, problem)
        except impls_mod.Unavailable as exc:
            rec.status, rec.reason = SKIPPED, str(exc)
            continue
        except Exception as exc:
            rec.status, rec.reason = FAILED, f"setup: {one_line(exc)}"
            rec.notes.append(traceback.format_exc())
            continue
        built[name] = impl
        rec.notes += impl.notes
        try:
            rec.error = validate.check(problem, impl, expected, driver.synchronize)
        except Exception as exc:
            rec.status, rec.reason = FAILED, f"validation run: {one_line(exc)}"
            rec.notes.append(traceback.format_exc())
        else:
            if not validate.passed(rec.error, dtype):
                worst = max(rec.error, key=rec.error.get)
                rec.status = FAILED
                rec.reason = (f"validation: relative error of {worst} {rec.error[worst]:.3g} >= "
                              f"{validate.TOLERANCE[dtype]:g} ({dtype} tolerance)")
    return built


def run_problem(config: Config, ctx: impls_mod.Context, timer: timing.EventTimer, device, rng,
                op_name: str, dtype: str, shape: Shape) -> list[Record]:
    op = ops_mod.get(op_name)
    names = config.impls_for(op_name)
    itemsize = {"bfloat16": 2, "float16": 2, "float32": 4}[dtype]
    nbytes = op.bytes_moved(shape.tokens, shape.hidden, itemsize)
    records = {n: Record(op_name, dtype, shape.tokens, shape.hidden, n, nbytes) for n in names}
    built: dict[str, impls_mod.Impl] = {}
    problem = None
    try:
        problem = Problem(op, dtype, shape, device=device, rng=rng, cap_bytes=int(config.memory_cap_gib * GIB),
                          l2_factor=config.l2_factor)
        expected = validate.Expected(problem, config.epsilon)
        ctx.compile_here = config.compile_at(op_name, shape)
        batch = config.batch or stats.batch_size(nbytes)
        for name in names:
            records[name].sets, records[name].batch = problem.sets, batch
        built = build_checked(op_name, dtype, ctx, problem, expected, records)
        cursors = {}
        for name, impl in built.items():
            rec = records[name]
            if rec.status != OK:
                continue
            try:
                host_us = timer.warm_up(impl.launch, problem.sets, 2 * batch)
                cursors[name] = timing.Cursor(problem.sets, batch, spin_us=timing.initial_spin_us(host_us, batch))
            except Exception as exc:
                rec.status, rec.reason = FAILED, f"warm-up: {one_line(exc)}"
                rec.notes.append(traceback.format_exc())
        for _ in range(config.rounds):
            for name, cursor in cursors.items():
                rec = records[name]
                if rec.status != OK:
                    continue
                try:
                    rec.rounds.append(timer.samples(built[name].launch, cursor, config.reps))
                except Exception as exc:
                    rec.status, rec.reason = FAILED, f"timing: {one_line(exc)}"
                    rec.notes.append(traceback.format_exc())
        for name, cursor in cursors.items():
            records[name].host_bound = cursor.host_bound
    except Exception as exc:  # the problem itself (allocation, fill): every implementation fails with it
        for rec in records.values():
            if rec.status == OK and not rec.rounds:
                rec.status, rec.reason = FAILED, f"problem setup: {one_line(exc)}"
        print(f"pyrms.bench: {op_name} {dtype} {shape}: {one_line(exc)}", file=sys.stderr)
    finally:
        for impl in built.values():
            try:
                impl.close()
            except Exception:
                pass
        built.clear()
        if problem is not None:
            problem.close()
        if ctx.torch is not None:
            ctx.torch.cuda.synchronize()
            ctx.torch.cuda.empty_cache()
    return list(records.values())


def progress_line(records: list[Record], ceiling_gbps: float, seconds: float) -> str:
    """One line per problem: each implementation's µs and fraction of the ceiling, or its status."""
    r0 = records[0]
    parts = []
    for r in records:
        if r.status == OK and r.median_us is not None:
            parts.append(f"{r.impl} {r.median_us:.1f}us {r.gbps / ceiling_gbps:.0%}")
        else:
            parts.append(f"{r.impl} {r.status.upper()}")
    return f"[{r0.op} {r0.dtype} {r0.tokens}x{r0.hidden}] " + ", ".join(parts) + f"  ({seconds:.1f} s)"


def run(config: Config, ctx, timer, device, rng, ceiling_gbps: float, progress, on_problem=None) -> list[Record]:
    """Every (op, dtype, shape) of the config, in that order; ``on_problem(records)`` after each."""
    records: list[Record] = []
    for op_name in config.ops:
        for dtype in config.dtypes:
            for shape in config.shapes_for(op_name):
                start = time.perf_counter()
                done = run_problem(config, ctx, timer, device, rng, op_name, dtype, shape)
                records += done
                progress(progress_line(done, ceiling_gbps, time.perf_counter() - start))
                if on_problem is not None:
                    on_problem(records)
    return records

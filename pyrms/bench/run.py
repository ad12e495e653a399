"""One run, section by section: copy ceiling, sweep, after a GEMM, launch floor, host time, graphs, copy
ceiling again, targets, files. Partial JSON is written after every shape, so a run that breaks off still
leaves its numbers."""
from __future__ import annotations

import sys
import time
import traceback

import numpy as np

from .. import driver
from . import ceiling as ceiling_mod
from . import after_gemm as after_gemm_mod
from . import env, report, sweep
from . import floor as floor_mod
from . import host as host_mod
from . import targets as targets_mod
from . import timing
from .config import PYRMS_IMPLS, Config
from .impls import Context
from .results import FAILED
from .torch_impls import load_torch, load_triton

TORCH_IMPLS = ("torch", "compile", "triton", "liger", "flashinfer", "flashinfer_pdl")  # those that need PyTorch


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _context(config: Config, device) -> Context:
    torch, torch_reason, triton, triton_reason = None, "not selected (--impls)", None, "not selected (--impls)"
    # The after-GEMM section's GEMMs and graphs are PyTorch's, whatever the implementations
    if any(i in config.impls for i in TORCH_IMPLS) or (config.after_gemm and after_gemm_mod.problems(config)):
        torch, torch_reason = load_torch()
        if torch is not None:
            torch.cuda.set_device(device.ordinal)
    if "triton" in config.impls:
        triton, triton_reason = load_triton(torch)
    # One stream for everything: PyTorch's current one (the legacy default stream, handle 0, unless
    # PyTorch was built or configured for per-thread default streams); without PyTorch, handle 0.
    stream = int(torch.cuda.current_stream().cuda_stream) if torch is not None else 0
    return Context(stream=stream, epsilon=config.epsilon, torch=torch, torch_reason=torch_reason,
                   triton=triton, triton_reason=triton_reason)


def run(config: Config, argv) -> int:
    start = time.perf_counter()
    device = driver.set_device(config.device)
    info = env.collect(device, argv)
    _progress(f"pyrms.bench: {device.name}, {info['command']}")
    ctx = _context(config, device)
    for name, why in (("PyTorch", ctx.torch_reason if ctx.torch is None else ""),
                      ("Triton", ctx.triton_reason if ctx.triton is None else "")):
        if why:
            _progress(f"  {name}: {why}")
    rng = np.random.default_rng(config.seed)
    state = {"ceiling": None, "ceiling_end": None, "records": [], "floor": None, "host": None, "graphs": None,
             "after_gemm": None}
    files = []

    def snapshot(partial: bool, targets=()):
        data = report.to_json(info, config, state["ceiling"], state["ceiling_end"], state["records"], state["host"],
                              state["graphs"], list(targets), time.perf_counter() - start, partial, state["floor"],
                              state["after_gemm"])
        report.write_json(config.json_path, data)

    timer = timing.EventTimer(device, ctx.stream)
    status = 0
    try:
        reps = 5 if config.quick else 10
        state["ceiling"] = ceiling_mod.measure(timer, device, config.copy_mib, reps, "start")
        ceiling_gbps = state["ceiling"].gbps
        _progress(f"copy ceiling: {ceiling_gbps:.0f} GB/s (device-to-device copy, read + write bytes)")
        if config.sweep:
            def on_problem(records):
                state["records"] = records
                snapshot(True)

            state["records"] = sweep.run(config, ctx, timer, device, rng, ceiling_gbps, _progress, on_problem)
        if config.after_gemm:
            _progress("after a GEMM, in a CUDA graph ...")
            try:
                state["after_gemm"] = after_gemm_mod.measure(config, ctx, timer, device, rng, _progress)
            except Exception as exc:
                state["after_gemm"] = {"reason": _one_line(exc), "traceback": traceback.format_exc()}
            snapshot(True)
        if config.floor:
            _progress("launch floor ...")
            state["floor"] = floor_mod.measure(config, timer, device, rng, _progress)
        if config.host:
            _progress("host time per call ...")
            try:
                state["host"] = host_mod.host_overhead(ctx, device, rng, config.host_calls, config.epsilon)
            except Exception as exc:
                state["host"] = {"reason": _one_line(exc), "traceback": traceback.format_exc()}
        if config.graphs:
            _progress("CUDA graphs ...")
            try:
                state["graphs"] = host_mod.graphs(ctx, device, rng, 10 if config.quick else 30, config.epsilon)
            except Exception as exc:
                state["graphs"] = {"reason": _one_line(exc), "traceback": traceback.format_exc()}
        state["ceiling_end"] = ceiling_mod.measure(timer, device, config.copy_mib, reps, "end")
    except Exception as exc:
        _progress(traceback.format_exc())
        _progress(f"pyrms.bench: the run broke off: {_one_line(exc)}")
        status = 1
    finally:
        timer.close()

    ceiling = state["ceiling"]
    targets = targets_mod.evaluate(state["records"], ceiling.gbps if ceiling else None, state["host"], state["floor"])
    snapshot(status != 0, targets)
    files.append(config.json_path)
    if config.plot and ceiling is not None and state["records"]:
        why_not = report.write_plot(config.plot_path, state["records"], ceiling.gbps, report.plot_title(info))
        if why_not:
            _progress(why_not)
        else:
            files.append(config.plot_path)
    files.append(config.text_path)
    text = report.full_text(info, ceiling, state["ceiling_end"], state["records"], state["host"], state["graphs"],
                            targets, config, time.perf_counter() - start, files, state["floor"], state["after_gemm"])
    config.text_path.write_text(text + "\n")
    print(text)
    after = state["after_gemm"] if isinstance(state["after_gemm"], list) else []
    if any(r.impl in PYRMS_IMPLS and r.status == FAILED for r in state["records"] + after):
        status = max(status, 1)
    return status

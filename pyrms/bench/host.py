"""Host cost per call, and CUDA graph capture of pyrms launches against the same launches made one by one.

Host time: calls are made in batches of BATCH on a small shape (1 x 4096 bf16); each batch starts
with an idle device and an empty launch queue (synchronized outside the timed region), so the
device, which runs a small launch in a couple of microseconds, can never push back on the host.
perf_counter around each batch / BATCH; median over batches, the variants interleaved batch by batch.

The bare launch is the floor: ``cuda.bindings.driver.cuLaunchKernel`` called directly on the very
kernels, grids, blocks and arguments that one call of an op launched (recorded by wrapping pyrms's
launch layer for one call), packed once; every op is compared with its own bare launches. This file imports cuda.bindings itself for
that comparison only; pyrms's own code reaches the driver through pyrms.driver.
"""
from __future__ import annotations

import contextlib
import gc
import operator
import time

import numpy as np

from .. import driver, dtypes, launch
from ..ops._bind import bound_call
from . import ops as ops_mod
from . import problem as problem_mod
from . import stats

BATCH = 200
HOST_SHAPE = (1, 4096)
GRAPH_LAUNCHES = 100
GRAPH_SHAPES = ((1, 4096), (128, 5120))


@contextlib.contextmanager
def recorded_launches():
    """Every pyrms kernel launch inside the block (Kernel.launch, the prepared ops' RowLaunch, and bound launches:
    pyrms.bind's, and a repeated raw-pointer call's), as (kernel, grid, block, args, stream, shared_bytes); not
    the launches recorded for binding (launch.binding), which are not made."""
    calls = []
    original, original_rows = launch.Kernel.launch, launch.RowLaunch.__call__
    originals_bound = {cls: cls.__call__ for cls in (launch.BoundLaunch, launch.BoundLaunches)}

    def recording(self, grid, block, args, stream=None, shared_bytes=0, pdl=False):
        if not launch.binding_now():
            calls.append((self, grid, block, tuple(args), stream, shared_bytes))
        return original(self, grid, block, args, stream, shared_bytes, pdl)

    def recording_rows(self, kernel, grid, stream, *head):
        if not launch.binding_now():
            calls.append((kernel, grid, self.block, (*head, *self.tail), stream, self.shared_bytes))
        return original_rows(self, kernel, grid, stream, *head)

    def recording_bound(self, stream=None):
        if not launch.binding_now():
            calls.extend((r.kernel, r.grid, r.block, r.args, r.stream if stream is None else stream, r.shared_bytes)
                         for r in self.recorded)
        return originals_bound[type(self)](self, stream)

    launch.Kernel.launch, launch.RowLaunch.__call__ = recording, recording_rows
    for cls in originals_bound:
        cls.__call__ = recording_bound
    try:
        yield calls
    finally:
        launch.Kernel.launch, launch.RowLaunch.__call__ = original, original_rows
        for cls, call in originals_bound.items():
            cls.__call__ = call


def _dims3(value) -> tuple[int, int, int]:
    dims = (operator.index(value),) if not isinstance(value, (tuple, list)) else tuple(map(operator.index, value))
    return dims + (1,) * (3 - len(dims))


def _cuda_bindings_driver():
    """The raw binding: the comparison point, with nothing of pyrms in between (a function, so that
    the CPU tests can put their stand-in driver here)."""
    from cuda.bindings import driver as cu

    return cu


def bare_launcher(call):
    """A function making ``call``'s launch through cuLaunchKernel with arguments packed once."""
    cu = _cuda_bindings_driver()
    kernel, grid, block, args, stream, shared = call
    pack = launch.ArgPack(kernel.signature, kernel.name)
    address = pack.pack(args)
    gx, gy, gz = _dims3(grid)
    bx, by, bz = _dims3(block)
    handle, stream = kernel.handle, driver.stream_handle(stream)
    cu_launch = cu.cuLaunchKernel

    def bare():
        result = cu_launch(handle, gx, gy, gz, bx, by, bz, shared, stream, address, 0)
        if result[0]:
            raise RuntimeError(f"cuLaunchKernel failed: {result[0]!r}")

    bare.pack = pack  # keeps the packed arguments alive with the function
    return bare


def _time_batches(variants: dict, batches: int) -> dict[str, list[float]]:
    """µs per call of each variant, one sample per batch, variants interleaved."""
    samples = {name: [] for name in variants}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(batches):
            for name, fn in variants.items():
                driver.synchronize()
                start = time.perf_counter()
                for _ in range(BATCH):
                    fn()
                samples[name].append((time.perf_counter() - start) * 1e6 / BATCH)
        driver.synchronize()
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def _bare_of(call):
    """A function making exactly the launches one ``call()`` makes, each a bare cuLaunchKernel with its
    arguments packed once; None if the call launched nothing."""
    call()
    driver.synchronize()
    with recorded_launches() as made:
        call()
    driver.synchronize()
    if not made:
        return None
    bares = [bare_launcher(m) for m in made]
    if len(bares) == 1:
        return bares[0]
    return lambda: [b() for b in bares]


def host_variants(ctx, operands: ops_mod.HostOperands) -> tuple[dict, dict, dict]:
    """The host section's calls on ``operands``, each a function of no arguments, resolved and warmed: for every
    op with a host call (ops.Bench.host, in the registry's order), the bare cuLaunchKernel calls one call of it
    makes, the op on raw ints (named by ops.Bench.host_variants) and the same call bound ("<op> bound",
    pyrms.bind's launch); then each op's extra variants (ops.Bench.host_extras). Returns (variants by name,
    op -> why it was skipped, notes for the JSON)."""
    benches = [b for b in ops_mod.benches().values() if b.host is not None or b.host_extras is not None]
    variants, skipped, notes = {}, {}, {}
    for bench in benches:
        if bench.host is None:
            continue
        call = bench.host(operands)
        try:  # one op that cannot run here (no memory pools, say) does not cost the others their figures
            bare = _bare_of(call)
        except Exception as exc:  # noqa: BLE001 - recorded in the results, with its reason
            skipped[bench.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            continue
        name, bare_name = bench.host_variants
        if bare is not None:
            variants[bare_name] = bare
        variants[name] = call
        try:  # the same call bound (pyrms.bind): packed once, one driver call per launch
            variants[f"{bench.name} bound"] = bound_call(call)
        except ValueError as exc:  # a call that cannot be bound (a backward borrowing its workspace)
            notes.setdefault("not_bound", {})[bench.name] = str(exc)
    for bench in benches:
        if bench.host_extras is not None:
            extra, why = bench.host_extras(operands, ctx)
            variants.update(extra)
            notes.update(why)
    return variants, skipped, notes


def host_overhead(ctx, device, rng, calls: int, epsilon: float) -> dict:
    """Host µs per call on 1x4096 bf16 of host_variants's calls (the raw-int calls named "bare <op>" and "<op>",
    the headline op's "bare" and "pyrms"), interleaved. Every call is built before timing: the timed loop calls
    it and nothing else."""
    tokens, hidden = HOST_SHAPE
    dt = dtypes.BFLOAT16
    nbytes = stats.pad(tokens * hidden * dt.itemsize)
    out: dict = {"shape": [tokens, hidden], "dtype": dt.name, "calls_per_batch": BATCH}
    stream = ctx.stream
    with contextlib.ExitStack() as buffers:
        rows = [buffers.enter_context(driver.DeviceBuffer(nbytes, device)) for _ in range(5)]
        vectors = [buffers.enter_context(driver.DeviceBuffer(stats.pad(hidden * 4), device)) for _ in range(3)]
        for b in (*rows, *vectors):
            problem_mod.fill_random(b.ptr, b.nbytes, dt, rng)
        x, r, y, dy, gx = (b.ptr for b in rows)
        w, bias, gw = (b.ptr for b in vectors)
        operands = ops_mod.HostOperands(tokens, hidden, dt, device.ordinal, stream, epsilon,
                                        x, r, y, dy, gx, w, bias, gw)
        variants, skipped, notes = host_variants(ctx, operands)
        if skipped:
            out["skipped"] = skipped
        out.update(notes)
        if ctx.torch is None:
            out["torch_reason"] = ctx.torch_reason
        _time_batches(variants, 2)  # warm-up
        batches = max(5, calls // BATCH)
        samples = _time_batches(variants, batches)
        variants.clear()  # the torch views must not outlive the buffers under them
    out["batches"] = batches
    out["samples_us"] = samples
    out["per_call_us"] = {name: float(np.median(v)) for name, v in samples.items()}
    out["spread"] = {name: float((np.percentile(v, 90) - np.percentile(v, 10)) / np.median(v))
                     for name, v in samples.items()}
    return out


def graphs(ctx, device, rng, reps: int, epsilon: float) -> dict:
    """GRAPH_LAUNCHES calls of the headline op (its host call, ops.Bench.host: x and y one rotation set per
    call) captured on a pyrms Stream and replayed, against the same calls made one by one on that stream;
    outputs compared bit for bit."""
    headline = ops_mod.headline()
    host_call = ops_mod.benches()[headline].host
    results = []
    dt = dtypes.BFLOAT16
    with driver.Stream(device) as stream, driver.Event(device=device) as e0, driver.Event(device=device) as e1:
        for tokens, hidden in GRAPH_SHAPES:
            row_bytes = tokens * hidden * dt.itemsize
            stride = stats.pad(row_bytes)
            n = GRAPH_LAUNCHES
            weight_bytes = stats.pad(hidden * dt.itemsize)
            with driver.DeviceBuffer(n * stride, device) as xs, driver.DeviceBuffer(n * stride, device) as ys, \
                    driver.DeviceBuffer(stats.pad(hidden * 4), device) as w, contextlib.ExitStack() as others:
                problem_mod.fill_random(xs.ptr, xs.nbytes, dt, rng)
                problem_mod.fill_random(w.ptr, weight_bytes, dt, rng)
                # The rest of what a host call may read (HostOperands: the vectors with room for fp32, r, dy, gx),
                # shared by every call: random data from a generator of its own, so that rng's draws (x, w) stay.
                r, dy, gx = (others.enter_context(driver.DeviceBuffer(stride, device)) for _ in range(3))
                bias, gw = (others.enter_context(driver.DeviceBuffer(stats.pad(hidden * 4), device)) for _ in range(2))
                own = np.random.default_rng(tokens)
                for ptr, nbytes in ((w.ptr + weight_bytes, w.nbytes - weight_bytes), *((b.ptr, b.nbytes)
                                                                                       for b in (r, dy, gx, bias, gw))):
                    if nbytes:
                        problem_mod.fill_random(ptr, nbytes, dt, own)
                calls = [host_call(ops_mod.HostOperands(tokens, hidden, dt, device.ordinal, stream.handle, epsilon,
                                                        xs.ptr + i * stride, r.ptr, ys.ptr + i * stride, dy.ptr,
                                                        gx.ptr, w.ptr, bias.ptr, gw.ptr)) for i in range(n)]

                def all_launches():
                    for call in calls:
                        call()

                all_launches()  # compile, load, warm
                stream.synchronize()
                one_by_one = np.empty(ys.nbytes, np.uint8)
                driver.memcpy_dtoh(one_by_one, ys.ptr)
                with driver.capture(stream) as graph:
                    all_launches()
                try:
                    driver.memset_d8(ys.ptr, problem_mod.POISON, ys.nbytes)
                    graph.launch(stream)  # instantiates
                    stream.synchronize()
                    replayed = np.empty(ys.nbytes, np.uint8)
                    driver.memcpy_dtoh(replayed, ys.ptr)
                    same = bool(np.array_equal(one_by_one, replayed))
                    modes = {"one_by_one": all_launches, "graph": lambda: graph.launch(stream)}
                    timings = {m: {"host_us": [], "device_us": [], "end_to_end_us": []} for m in modes}
                    for _ in range(reps):
                        for mode, fn in modes.items():
                            stream.synchronize()
                            t0 = time.perf_counter()
                            e0.record(stream)
                            fn()
                            e1.record(stream)
                            t1 = time.perf_counter()
                            stream.synchronize()
                            t2 = time.perf_counter()
                            timings[mode]["host_us"].append((t1 - t0) * 1e6)
                            timings[mode]["device_us"].append(e1.elapsed_ms(e0) * 1e3)
                            timings[mode]["end_to_end_us"].append((t2 - t0) * 1e6)
                finally:
                    graph.close()
            medians = {m: {k: float(np.median(v)) for k, v in t.items()} for m, t in timings.items()}
            results.append({"op": headline, "tokens": tokens, "hidden": hidden, "dtype": dt.name, "launches": n,
                            "graph_output_matches": same, "median": medians, "samples": timings})
    return {"shapes": results}

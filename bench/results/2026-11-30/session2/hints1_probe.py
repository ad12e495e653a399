"""EXPERIMENT: rms_norm.cu with cache hints (PYRMS_HINT 0..5) at the plan's launch shape, timed like the bench."""
import sys
sys.path.insert(0, ".")
import numpy as np
from pyrms import driver, dtypes, plan, compiler, launch, reference
from pyrms.bench import timing, ceiling
from pyrms.ops.rms_norm import _SIGNATURE
dt = dtypes.get("bfloat16")
dev = driver.current_device()
timer = timing.EventTimer(dev, 0)
ceil = ceiling.measure(timer, dev, 1024, 5, "x").gbps
print(f"ceiling {ceil:.0f}", flush=True)
shapes = [(16384, 5120), (32768, 8192), (4096, 16384), (16384, 8192), (4096, 5120), (4096, 8192)]
modes = [int(m) for m in sys.argv[1].split(",")]
fns = {}
for m in modes:
    p = plan.plan_rms_norm(dt, 5120)
    prog = compiler.compile_source(p.source, arch=dev.arch, name_expressions=p.group, options=(f"-DPYRMS_HINT={m}",))
    mod = launch.load_module(prog.cubin, dev)
    fns[m] = (prog, mod)
rng = np.random.default_rng(0)
for T, H in shapes:
    p = plan.plan_rms_norm(dt, H)
    nbytes = (2 * T * H + H) * 2
    sets = max(2, -(-2 * dev.l2_cache_bytes // (2 * T * H * 2)))
    x = rng.uniform(-2, 2, (T, H)).astype(dt.numpy); w = rng.uniform(-1, 1, H).astype(dt.numpy)
    step = -(-x.nbytes // 256) * 256
    xp, yp, wb = driver.DeviceBuffer(sets * step), driver.DeviceBuffer(sets * step), driver.DeviceBuffer(w.nbytes)
    for i in range(sets): driver.memcpy_htod(xp.ptr + i * step, x)
    driver.memcpy_htod(wb.ptr, w)
    want = reference.rms_norm_twin(x[:4], w, 1e-6, block=p.block)
    row = []
    for rep in range(2):
        for m in modes:
            prog, mod = fns[m]
            k = mod.function(prog.lowered_names[p.expression], _SIGNATURE)
            run = lambda i, k=k: k.launch(T, p.block, (yp.ptr + i * step, xp.ptr + i * step, wb.ptr, 1e-6, H, H, H), 0)
            run(0); got = np.empty((4, H), dt.numpy); driver.memcpy_dtoh(got, yp.ptr)
            ok = np.array_equal(got.view(np.uint16), want.view(np.uint16))
            us = timing.median_us(timer, run, sets, 15)
            row.append(f"h{m}={us:.2f}us/{nbytes / us / 1e3 / ceil:.3f}{'' if ok else 'WRONG'}")
    print(f"{T}x{H} {p.block}/{p.cache}: " + " ".join(row), flush=True)
    for b in (xp, yp, wb): b.close()

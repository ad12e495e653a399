"""EXPERIMENT: forward kernels compiled with -DPYRMS_HINT=m (0 plain, 1 __ldcs/__stcs), through the public ops, timed like the bench."""
import sys
sys.path.insert(0, ".")
import numpy as np
import pyrms
from pyrms import driver, dtypes, compiler, kernels
import importlib; rms_mod = importlib.import_module("pyrms.ops.rms_norm")
from pyrms.bench import timing, ceiling
dt = dtypes.get("bfloat16")
dev = driver.current_device()
timer = timing.EventTimer(dev, 0)
ceil = ceiling.measure(timer, dev, 1024, 5, "x").gbps
print(f"ceiling {ceil:.0f}", flush=True)
base = compiler._BASE_OPTIONS
def use(m):
    compiler._BASE_OPTIONS = base + (f"-DPYRMS_HINT={m}",)
    kernels._kernels.clear(); rms_mod._fast_configs.clear()
cases = [("rms", T, H) for T, H in [(16384,1024),(8192,2048),(4096,4096),(1024,4096),(128,5120),(1,5120),(4096,5120),(16384,5120),(2048,65536)]]
cases += [("fused", 16384, 5120), ("fused", 4096, 5120), ("fused", 4096, 8192), ("ln", 16384, 5120), ("ln", 4096, 8192)]
rng = np.random.default_rng(0)
for op, T, H in cases:
    arrays = {"rms": 2, "fused": 4, "ln": 2}[op]
    nbytes = (arrays * T * H + H * (2 if op == "ln" else 1)) * 2
    sets = max(2, -(-2 * dev.l2_cache_bytes // (arrays * T * H * 2)))
    step = -(-T * H * 2 // 256) * 256
    pools = [driver.DeviceBuffer(sets * step) for _ in range(2)]
    for pool in pools: driver.memset_d8(pool.ptr, 0x3c, sets * step)
    w = pyrms.Tensor.from_numpy(rng.uniform(-1, 1, H).astype(dt.numpy)); b = pyrms.Tensor.from_numpy(rng.uniform(-1, 1, H).astype(dt.numpy))
    a0, a1 = (lambda i: pools[0].ptr + i * step), (lambda i: pools[1].ptr + i * step)
    if op == "rms": run = lambda i: pyrms.rms_norm(a1(i), a0(i), w.ptr, 1e-6, T, H, dtype=dt)
    elif op == "fused": run = lambda i: pyrms.fused_add_rms_norm(a0(i), a1(i), w.ptr, 1e-6, T, H, dtype=dt)
    else: run = lambda i: pyrms.layer_norm(a1(i), a0(i), w.ptr, b.ptr, 1e-6, T, H, dtype=dt)
    row = []
    for rep in range(2):
        for m in (0, 1):
            use(m)
            us = timing.median_us(timer, run, sets, 15)
            row.append(f"h{m}={us:.2f}us/{nbytes / us / 1e3 / ceil:.3f}")
    print(f"{op} {T}x{H}: " + " ".join(row), flush=True)
    for p in pools: p.close()
    w.close(); b.close()

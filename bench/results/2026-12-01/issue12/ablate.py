"""Ablations of the few-row rms_norm kernel at decode sizes (scratch experiment, not a product tool).
Each variant is cuda_src with textual edits, compiled from a temp include dir placed first, launched with
the planned few-row shape, checked against the twin where the variant keeps the numerics, and timed like
the benchmark (rotated inputs, events behind a spin), without and with PDL."""
import sys, tempfile, shutil
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
from pyrms import compiler, driver, dtypes, launch, plan, reference
from pyrms.bench import timing

SRC = Path("cuda_src")
import os
OUT = os.environ.get("ABLATE_OUT", "/tmp")
V = {
    "base": {},
    "no_griddep": {"common.cuh": [('asm volatile("griddepcontrol.wait;" ::: "memory");', ""),
                                  ('asm volatile("griddepcontrol.launch_dependents;" ::: "memory");', "")]},
    "no_hints": {"common.cuh": [("__ldcs(reinterpret_cast<const uint4*>(p))", "*reinterpret_cast<const uint4*>(p)"),
                                ("__stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));",
                                 "*reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);")]},
    "approx_rsqrt*": {"common.cuh": [("return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(n)), eps)));",
                                      "return rsqrtf(sum_sq / n + eps);")]},
    "no_early_w": {"rms_norm_row.cuh": [("if constexpr (EARLY_WEIGHTS) load_held_weights", "if constexpr (false) load_held_weights")],
                   "row_core.cuh": [("vector(v, held[k], EARLY_WEIGHTS ? held_w[k]", "vector(v, held[k], false ? held_w[k]")]},
    "no_second_sum*": {"row_core.cuh": [("    return sum_of_warp_totals(scratch, F >> 5);", "    return scratch[0];")]},
    "aligned_only*": {"common.cuh": [("    if (width == 16) {", "    if (true) {")],
                      "row_core.cuh": [("        if (t < s.pre) acc = __fadd_rn(acc, term(to_float(src.elem(t))));\n", ""),
                                       ("        for (int v = t + j * F; v < s.vectors; v += F) acc", "        for (int v = t + j * F; false; v += F) acc"),
                                       ("        if (s.tail + t < n) acc = __fadd_rn(acc, term(to_float(src.elem(s.tail + t))));\n", ""),
                                       ("    if (u < s.pre) element(u);\n    if (s.tail + u < n) element(s.tail + u);\n", ""),
                                       ("    for (int v = first_unheld; v < s.vectors; v += B) {", "    for (int v = first_unheld; false; v += B) {")]},
    "empty*": {"rms_norm.cu": [("    begin_dependent_grid();\n", "    begin_dependent_grid(); if (hidden > 0) return;\n")]},
}
dt = dtypes.BFLOAT16
dev = driver.current_device()
timer = timing.EventTimer(dev, 0)
rng = np.random.default_rng(0)
sig = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
for hidden in (4096, 5120, 8192):
    p = plan.plan_rms_norm(dt, hidden)
    x = rng.uniform(-2, 2, (1, hidden)).astype(dt.numpy); w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
    sets = 4096
    step = -(-x.nbytes // 256) * 256
    xp, yp, wp = driver.DeviceBuffer(sets * step), driver.DeviceBuffer(sets * step), driver.DeviceBuffer(sets * step)
    for i in range(sets):
        driver.memcpy_htod(xp.ptr + i * step, x); driver.memcpy_htod(wp.ptr + i * step, w)
    want = reference.rms_norm_twin(x, w, 1e-6, block=p.block)
    line = []
    for name, edits in V.items():
        d = Path(tempfile.mkdtemp())
        for f in SRC.iterdir():
            text = f.read_text()
            for a, b in edits.get(f.name, []):
                assert a in text, (name, f.name, a)
                text = text.replace(a, b)
            (d / f.name).write_text(text)
        prog = compiler.compile_text(f"ablate_{name}.cu", (d / "rms_norm.cu").read_text(), arch=dev.arch,
                                     name_expressions=[p.latency_expression], options=[f"-I{d}"], use_cache=False)
        k = launch.load_module(prog.cubin, dev).function(prog.lowered_names[p.latency_expression], sig)
        if hidden == 5120:
            Path(OUT, f"{name.strip('*')}.cubin").write_bytes(prog.cubin)
        for pdl in (False, True):
            def run(i, k=k, pdl=pdl):
                k.launch(1, p.latency_block, (yp.ptr + i * step, xp.ptr + i * step, wp.ptr + i * step, 1e-6, hidden, hidden, hidden), 0, pdl=pdl)
            run(0); driver.synchronize()
            got = np.empty_like(x); driver.memcpy_dtoh(got, yp.ptr)
            ok = np.array_equal(got.view(np.uint16), want.view(np.uint16))
            us = timing.median_us(timer, run, sets, 10, batch=50)
            line.append(f"{name}{'+pdl' if pdl else ''}={us:.2f}{'' if ok or name.endswith('*') else ' WRONG'}")
        shutil.rmtree(d)
    from pyrms.ops.seed import seed_rms_norm
    def run_seed(i):
        seed_rms_norm(yp.ptr + i * step, xp.ptr + i * step, wp.ptr + i * step, 1e-6, 1, hidden, dtype=dt)
    line.append(f"seed={timing.median_us(timer, run_seed, sets, 10, batch=50):.2f}")
    print(f"1x{hidden} ({p.latency_block} threads): " + "  ".join(line), flush=True)
    for b in (xp, yp, wp):
        b.close()

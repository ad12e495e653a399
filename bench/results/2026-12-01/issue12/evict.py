"""Large shapes: the planned register-cached rms_norm against a re-reading one (CACHE=0, the plan's fold
width, so the same bits) with and without L2 eviction hints (pass 1 evict_last, the re-read evict_first,
as inductor's kernel does). Scratch experiment: text edits of cuda_src compiled from a temp include dir."""
import os, sys, tempfile, shutil
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
from pyrms import compiler, driver, dtypes, launch, plan, reference
from pyrms.bench import timing, ceiling

SRC = Path("cuda_src")
HINTS = r'''
template <typename T> __device__ __forceinline__ Pack<T> load_l2_policy(const T* p, bool keep) {
    Pack<T> r;
    unsigned* d = reinterpret_cast<unsigned*>(&r);
    unsigned long long pol;
    if (keep) {
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    } else {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    }
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "l"(p), "l"(pol));
    return r;
}

}  // namespace pyrms'''
V = {
    "reread": {},
    "reread_hints": {
        "common.cuh": [("\n}  // namespace pyrms", HINTS)],
        "row_core.cuh": [("    __device__ __forceinline__ Pack<T> vec(int at) const { return load_aligned(row + at); }",
                          "    __device__ __forceinline__ Pack<T> vec(int at) const { return load_l2_policy(row + at, true); }"),
                         ("        vector(v, load_pack(x + s.pre + v * N, x_width), load_pack(w + s.pre + v * N, w_width));",
                          "        vector(v, x_width == 16 ? load_l2_policy(x + s.pre + v * N, false) : load_pack(x + s.pre + v * N, x_width),\n               load_pack(w + s.pre + v * N, w_width));")]},
}
dt = dtypes.BFLOAT16
dev = driver.current_device()
timer = timing.EventTimer(dev, 0)
ceil = ceiling.measure(timer, dev, 1024, 5, "evict").gbps
print(f"copy ceiling {ceil:.0f} GB/s")
sig = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
rng = np.random.default_rng(0)
progs = {}
for name, edits in V.items():
    d = Path(tempfile.mkdtemp())
    for f in SRC.iterdir():
        text = f.read_text()
        for a, b in edits.get(f.name, []):
            assert a in text, (name, f.name, a)
            text = text.replace(a, b)
        (d / f.name).write_text(text)
    exprs = [plan.kernel_expression(dt, 0, 1, False, False)]
    progs[name] = (compiler.compile_text(f"evict_{name}.cu", (d / "rms_norm.cu").read_text(), arch=dev.arch,
                                         name_expressions=exprs, options=[f"-I{d}"], use_cache=False), exprs[0])
for tokens, hidden in ((16384, 8192), (32768, 8192), (4096, 16384), (16384, 5120), (4096, 8192)):
    p = plan.plan_rms_norm(dt, hidden)
    x = rng.uniform(-2, 2, (tokens, hidden)).astype(dt.numpy); w = rng.uniform(-1, 1, hidden).astype(dt.numpy)
    nbytes = (2 * tokens * hidden + hidden) * 2
    sets = max(2, -(-2 * dev.l2_cache_bytes // (x.nbytes * 2)))
    xs = [driver.DeviceBuffer(x.nbytes) for _ in range(sets)]; ys = [driver.DeviceBuffer(x.nbytes) for _ in range(sets)]
    wb = driver.DeviceBuffer(w.nbytes)
    for b in xs:
        driver.memcpy_htod(b.ptr, x)
    driver.memcpy_htod(wb.ptr, w)
    want = reference.rms_norm_twin(x[:8], w, 1e-6, block=p.block)
    cands = {"planned": (launch.load_module(compiler.compile_source(p.source, arch=dev.arch, name_expressions=p.group).cubin, dev)
                         .function(compiler.compile_source(p.source, arch=dev.arch, name_expressions=p.group).lowered_names[p.expression], sig))}
    for name, (prog, expr) in progs.items():
        cands[name] = launch.load_module(prog.cubin, dev).function(prog.lowered_names[expr], sig)
    line = []
    for name, k in cands.items():
        def run(i, k=k):
            k.launch(tokens, p.block, (ys[i].ptr, xs[i].ptr, wb.ptr, 1e-6, hidden, hidden, hidden), 0)
        run(0); driver.synchronize()
        got = np.empty((8, hidden), dt.numpy); driver.memcpy_dtoh(got, ys[0].ptr)
        ok = np.array_equal(got.view(np.uint16), want.view(np.uint16))
        us = timing.median_us(timer, run, sets, 7, batch=4)
        line.append(f"{name}={us:.2f}us/{nbytes / us / 1e3 / ceil:.3f}{'' if ok else ' WRONG'}")
    print(f"{tokens}x{hidden} (F={p.block}, planned cache {p.cache}): " + "  ".join(line), flush=True)
    for b in (*xs, *ys, wb):
        b.close()

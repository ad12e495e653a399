"""Count Python calls per call of rms_norm, the backward, fused add and LayerNorm through a tree's own fake driver (deterministic)."""
import cProfile, pstats, sys, io, os
tree = sys.argv[1]
sys.path[:0] = [tree, tree + "/tests"]
os.environ.setdefault("PYRMS_CACHE_DIR", "/tmp/pc-hostcount")
import pyrms
from pyrms import driver
from fake_driver import FakeDriver, fresh_driver_state
fake = FakeDriver()
class _Every:
    def __contains__(self, name): return True
fake.functions = _Every()
fresh_driver_state(setattr, fake)
HIDDEN, rows = 5120, 4
bufs = [driver.DeviceBuffer(n) for n in (2*rows*HIDDEN, 2*HIDDEN, 2*rows*HIDDEN, 2*rows*HIDDEN, 2*HIDDEN, 2*rows*HIDDEN)]
gi, gw, go, x, w, out = (b.ptr for b in bufs)
stream = driver.Stream()
calls = {
    "rms_norm": lambda: pyrms.rms_norm(out, x, w, 1e-6, rows, HIDDEN, stream=stream.handle),
    "rms_norm_backward": lambda: pyrms.rms_norm_backward(gi, gw, go, x, w, 1e-6, rows, HIDDEN, stream=stream.handle),
    "fused_add_rms_norm": lambda: pyrms.fused_add_rms_norm(x, out, w, 1e-6, rows, HIDDEN, stream=stream.handle),
    "layer_norm": lambda: pyrms.layer_norm(out, x, w, gw, 1e-6, rows, HIDDEN, stream=stream.handle),
}
for name, f in calls.items():
    for _ in range(3):
        f()
    fake.calls.clear() if hasattr(fake, "calls") else None
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(100):
        f()
    pr.disable()
    st = pstats.Stats(pr)
    mine = {k: v[1] for k, v in st.stats.items() if k[0].startswith(tree + "/pyrms")}
    print(f"{name}: {sum(mine.values()) / 100:.1f} calls of pyrms functions per call")
    if name in ("fused_add_rms_norm", "layer_norm"):
        for (f, line, fn), n in sorted(mine.items(), key=lambda kv: -kv[1]):
            print(f"   {n / 100:5.1f}  {f[len(tree):]}:{line}({fn})")

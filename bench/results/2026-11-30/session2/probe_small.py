"""Launch pyrms.rms_norm or the seed kernel N times at one shape (for ncu), or dump their cubins."""
import sys
sys.path.insert(0, ".")
import numpy as np
import pyrms
from pyrms import driver, compiler, plan, dtypes
from pyrms.ops.seed import plan_seed
what, T, H, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dt = dtypes.get("bfloat16")
if what == "cubins":
    p = plan.plan_rms_norm(dt, H)
    open(sys.argv[5] + "/rms_norm.cubin", "wb").write(compiler.compile_source(p.source, arch="sm_90", name_expressions=p.group).cubin)
    sp = plan_seed(dt, H)
    open(sys.argv[5] + "/seed.cubin", "wb").write(compiler.compile_source(sp.source, arch="sm_90", name_expressions=(sp.expression,)).cubin)
    sys.exit(0)
rng = np.random.default_rng(0)
x = pyrms.Tensor.from_numpy(rng.uniform(0.2, 1, (T, H)).astype(dt.numpy))
w = pyrms.Tensor.from_numpy(rng.uniform(-1, 1, H).astype(dt.numpy))
y = pyrms.Tensor.empty((T, H), dt)
fn = pyrms.rms_norm if what == "pyrms" else pyrms.seed_rms_norm
for _ in range(n):
    fn(y.ptr, x.ptr, w.ptr, 1e-6, T, H, dtype=dt)
driver.synchronize()
print(what, "done")

"""ptxas -v registers of the packed rms_norm_nd kernels (ALIGNED / not) for hidden 64-512 of each dtype, on the tree
on PYTHONPATH (no GPU). Used for run 33 onward: every packed variant's registers before and after a change."""
import re, sys
from pyrms import compiler, dtypes, plan
out = []
for dt in (dtypes.BFLOAT16, dtypes.FLOAT16, dtypes.FLOAT32):
    for h in (64, 128, 256, 512):
        p = plan.plan_rms_norm(dt, h)
        if not p.lanes: continue
        exprs = [p.nd_aligned_expression, p.nd_expression]
        prog = compiler.compile_source(p.source, arch="sm_90", name_expressions=exprs, use_cache=False, options=("--ptxas-options=-v",))
        regs = re.findall(r"Used (\d+) registers", prog.log)
        out.append(f"{dt.name}/{h}/L{p.lanes}:{'/'.join(regs)}")
print(" ".join(out))

"""ptxas registers of every kernel in a sample of compile units (bf16 default options) of the tree on PYTHONPATH."""
import re, sys, json
from pyrms import compiler, dtypes, precompile
res = {}
units = [u for u in precompile.every_unit(dtype_list=[dtypes.BFLOAT16])]
picked = [u for u in units if str(u).endswith(("bfloat16", "bfloat16 weight=none"))] + [u for u in units if "quant" in str(u)][:2]
for u in picked[: int(sys.argv[1])]:
    prog = compiler.compile_source(u.source, arch="sm_90", name_expressions=list(u.names), use_cache=False, options=("--ptxas-options=-v",))
    blocks = re.findall(r"Compiling entry function '(\S+)'.*?Used (\d+) registers", prog.log, re.S)
    for name, regs in blocks:
        res[f"{u}|{name}"] = int(regs)
json.dump(res, open(sys.argv[2], "w"))
print(len(picked), "units", len(res), "kernels")

"""ptxas -v registers and spill bytes of the quantizing kernels (bf16, e4m3fn, static / per_token / per_group units) on
the tree on PYTHONPATH (no GPU): the 64-register bound of min_blocks (run 36) checked for spills."""
import re
from pyrms import compiler, dtypes, precompile
units = [u for u in precompile.every_unit(dtype_list=[dtypes.BFLOAT16]) if "quant" in str(u) and ("float8_e4m3fn per_token" in str(u) or "float8_e4m3fn per_group" in str(u) or "float8_e4m3fn static" in str(u)) and "round_input" not in str(u)]
for u in units:
    prog = compiler.compile_source(u.source, arch="sm_90", name_expressions=list(u.names), use_cache=False, options=("--ptxas-options=-v",))
    out = []
    for name, body in re.findall(r"Compiling entry function '(\S+)'(.*?)(?=Compiling entry|\Z)", prog.log, re.S):
        regs = re.search(r"Used (\d+) registers", body); sp = re.search(r"(\d+) bytes spill stores", body)
        m = re.search(r"(fused_add_rms_norm_group_quant|fused_add_rms_norm_quant|rms_norm_group_quant|rms_norm_quant)_kernelI\w+?e4m3(\w{0,14})", name)
        out.append(f"{m.group(1)[:14]}{m.group(2)}={regs.group(1)}/{sp.group(1) if sp else '?'}")
    print(u, " ".join(out))

"""ptxas -v registers and spill bytes of the quantizing kernels with and without NORM_OUT (bf16 rows, e4m3fn,
each mode, plain and fused) on the tree on PYTHONPATH (no GPU): what the unquantized output costs the
64-register bound of the dynamic modes (min_blocks)."""
import re
import sys

from pyrms import compiler, dtypes, precompile

modes = sys.argv[1:] or ["static", "per_token", "per_group"]
for op in ("rms_norm_quant", "fused_add_rms_norm_quant"):
    for mode in modes:
        for norm_out in (False, True):
            u = precompile.unit(op, dtypes.BFLOAT16, 5120, out_dtype="float8_e4m3fn", mode=mode, norm_out=norm_out)
            prog = compiler.compile_source(u.source, arch="sm_90", name_expressions=list(u.names), use_cache=False,
                                           options=("--ptxas-options=-v",))
            out = []
            for name, body in re.findall(r"Compiling entry function '(\S+)'(.*?)(?=Compiling entry|\Z)", prog.log, re.S):
                regs = re.search(r"Used (\d+) registers", body)
                sp = re.search(r"(\d+) bytes spill stores", body)
                out.append(f"{regs.group(1)}/{sp.group(1) if sp else '?'}")
            print(f"{u}: {' '.join(out)}", flush=True)

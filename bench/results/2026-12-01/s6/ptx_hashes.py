"""PTX text of sample units of the tree on PYTHONPATH -> a json of sha256 per unit and kernel expression."""
import hashlib, json, sys
from pyrms import compiler, dtypes, precompile
units = [u for u in precompile.every_unit(dtype_list=[dtypes.BFLOAT16, dtypes.FLOAT32])]
res = {}
for u in units:
    if str(u) not in sys.argv[2].split(","): continue
    prog = compiler.compile_source(u.source, arch="sm_90", name_expressions=list(u.names), use_cache=False, want_ptx=True)
    ptx = prog.ptx if isinstance(prog.ptx, str) else bytes(prog.ptx).decode()
    # per entry: split on .entry
    for chunk in ptx.split(".entry")[1:]:
        name = chunk.split("(")[0].strip()
        code = "\n".join(l for l in chunk.splitlines() if not l.strip().startswith((".loc", ".file", "//")))
        res[f"{u}|{name}"] = hashlib.sha256(code.encode()).hexdigest()[:16]
json.dump(res, open(sys.argv[1], "w"))
print(len(res), "entries")

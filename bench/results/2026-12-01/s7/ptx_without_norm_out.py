"""The quantizing kernels without NORM_OUT compile to the PTX they had before norm_out (issue 14), apart from
their parameter list (two more: norm_out and its stride, unread): per unit, each kernel's body (from its first
instruction, `.loc`/comments left out, the kernel's own mangled name replaced, and on the tree with norm_out the
parameter numbers mapped back to the old ones) hashed, in the unit's expression order (the mangled names
differ: one more template argument). Run once on each tree:

    PYTHONPATH=TREE python ptx_without_norm_out.py OUT.json
"""
import hashlib
import json
import re
import sys

from pyrms import compiler, dtypes, plan

# the tree with norm_out has the NORM_OUT flag (and its parameters); the one before has neither
shifted = "norm_out" in plan.RmsNormQuantPlan.__dataclass_fields__
res = {}
for residual in (False, True):
    for mode in plan.QUANT_MODES:
        for dt in (dtypes.BFLOAT16,):
            for q in (dtypes.FLOAT8_E4M3FN,):
                for round_input in (False, True):
                    p = plan.plan_rms_norm_quant(dt, 7168, q, mode=mode, residual=residual, round_input=round_input)
                    prog = compiler.compile_source(p.source, arch="sm_90", name_expressions=list(p.group),
                                                   use_cache=False, want_ptx=True)
                    ptx = prog.ptx if isinstance(prog.ptx, str) else bytes(prog.ptx).decode()
                    by_name = {}
                    for chunk in ptx.split(".entry")[1:]:
                        name = chunk.split("(")[0].strip()
                        # past the parameter list, up to the debug sections that follow the unit's last kernel
                        body = re.split(r"\n\s*\.section", chunk[chunk.index("{"):])[0].replace(name, "K")
                        if shifted:  # the tree with norm_out: its parameter 1 is norm_out, the others one further on
                            body = re.sub(r"K_param_(\d+)", lambda m: "K_param_" + (
                                m.group(1) if m.group(1) == "0" else "NORM" if m.group(1) == "1"
                                else str(int(m.group(1)) - 1)), body)
                        lines = [l for l in body.splitlines() if not l.strip().startswith((".loc", ".file", "//"))]
                        by_name[name] = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
                    for i, expr in enumerate(p.group):
                        res[f"{p.kernel if mode != 'per_group' else p.group_kernel} {dt.name} {q.name} {mode} "
                            f"round_input={round_input} #{i}"] = by_name[prog.lowered_names[expr]]
json.dump(res, open(sys.argv[1], "w"), indent=0, sort_keys=True)
print(len(res), "kernels")

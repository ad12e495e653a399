O=$OUT/run5; mkdir -p $O
export PYTHONPATH=. ABLATE_OUT=$O
timeout 300 python3 .carry/ablate.py 2>&1 | grep -v "^pyrms: compiled" | tee $O/ablate.txt
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for f in $O/*.cubin; do echo "$f: $($CUOBJ -sass $f | grep -cE '^\s+/\*[0-9a-f]{4}\*/') SASS instructions"; done
python3 -c "
from pyrms import compiler, plan, dtypes
from pyrms.ops.seed import plan_seed
p=plan_seed('bfloat16',5120); prog=compiler.compile_source(p.source, arch='sm_90', name_expressions=[p.expression])
open('$O/seed.cubin','wb').write(prog.cubin)" 2>/dev/null
echo "seed: $($CUOBJ -sass $O/seed.cubin | grep -cE '^\s+/\*[0-9a-f]{4}\*/') SASS instructions"

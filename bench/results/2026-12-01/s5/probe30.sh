#!/bin/bash
# Run 30: after the fp32-sum kernel's generic lambda became a functor (NVRTC 13.0 refused it in run 29):
# the residual-semantics and torch GPU tests (run 29 stopped before them), and the four sanitizers
# (--quick) over fused add and both quantizing ops. Few files: the device tool returns only some.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
{
git log --oneline -1 2>/dev/null
python3 -m pyrms.precompile --arch sm_90 --jobs 16 2>&1 | grep -v "already cached\|compiled in"
} > $OUT/run30_precompile.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu --durations=5 tests/test_residual_semantics_gpu.py > $OUT/run30_residual.txt 2>&1 &
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu --durations=5 tests/test_torch_gpu.py > $OUT/run30_torch.txt 2>&1 &
wait
OPS=fused_add_rms_norm,rms_norm_quant,fused_add_rms_norm_quant QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=110 \
  timeout 130 tools/run_sanitizers.sh /tmp/san > $OUT/run30_sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $OUT/run30_sanitizers.txt
tar -czf $OUT/run30_sanitizer_logs.tgz -C /tmp san 2>/dev/null
tail -3 $OUT/run30_precompile.txt; tail -2 $OUT/run30_residual.txt; tail -2 $OUT/run30_torch.txt; tail -7 $OUT/run30_sanitizers.txt

#!/bin/bash
# Run 27: the quantizing ops after the twin's NaN fix: their GPU tests; the four sanitizers over the
# quantizing ops' and both backward passes' matrix (--quick: misalignments 0, 1, VEC-1); the quant bench.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
git log --oneline -1 > $OUT/commit.txt
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm_quant,fused_add_rms_norm_quant,rms_norm_backward,layer_norm_backward > $OUT/precompile.txt 2>&1
tail -1 $OUT/precompile.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_rms_norm_quant_gpu.py > $OUT/quant_tests.txt 2>&1
echo "quant rc=$?" >> $OUT/quant_tests.txt
tail -2 $OUT/quant_tests.txt
OPS=rms_norm_quant,fused_add_rms_norm_quant,rms_norm_backward,layer_norm_backward QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=200 \
  timeout 230 tools/run_sanitizers.sh $OUT/sanitizers > $OUT/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $OUT/sanitizers.txt
tail -8 $OUT/sanitizers.txt
timeout 200 python3 -m tools.bench_quant --tokens 1,16,16384 --reps 11 --json $OUT/quant_bench.json > $OUT/quant_bench.txt 2>&1
echo "bench rc=$?" >> $OUT/quant_bench.txt
rm -f $OUT/sanitizers/*.log.big

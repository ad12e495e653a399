#!/bin/bash
# Run 34: main with packed rows in (8, 2) lanes held to 6 blocks per SM, the quantizing kernels' y
# computed once and held to 64 registers (run 36's A/B): the precompile (NVRTC 13.0), the whole GPU suite (four pytest
# processes), compute-sanitizer over rms_norm_nd (whole matrix) and both quantizing ops (--quick), the
# QK-norm and quant benches, and Nsight Compute's counts for QK-norm's q and rms_norm_quant at 16384 rows.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
S=bench/results/2026-12-01/s6
R=/tmp/run34; mkdir -p $R
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; grep -v "compiled in\|already cached" $R/precompile.txt | tail -3
files=$(grep -l "mark.gpu" tests/test_*.py | sort)
i=0; for f in $files; do g=$((i % 4)); eval "G$g=\"\${G$g:-} $f\""; i=$((i + 1)); done
start=$(date +%s)
for g in 0 1 2 3; do
  eval "fl=\$G$g"
  timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 $fl > $R/gpu_suite_$g.txt 2>&1 &
done
wait
echo "suite: $(( $(date +%s) - start )) s" > $R/gpu_suite_time.txt
for g in 0 1 2 3; do tail -1 $R/gpu_suite_$g.txt; done
grep -h "^FAILED\|^ERROR" $R/gpu_suite_*.txt | head -20
OPS=rms_norm_nd,rms_norm_quant,fused_add_rms_norm_quant QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=100 \
  timeout 120 tools/run_sanitizers.sh /tmp/san > $R/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $R/sanitizers.txt
tail -6 $R/sanitizers.txt
timeout 100 python3 -m tools.bench_qk_norm --reps 11 --json $R/qk_norm.json > $R/qk_norm.txt 2>&1
echo "bench rc=$?" >> $R/qk_norm.txt
timeout 150 python3 -m tools.bench_quant --tokens 1,16,16384 --reps 11 --json $R/quant_bench.json > $R/quant_bench.txt 2>&1
echo "bench rc=$?" >> $R/quant_bench.txt
NCU="timeout 40 ncu --section SpeedOfLight --section InstructionStats --section LaunchStats --section Occupancy"
$NCU -k regex:rms_norm_nd_kernel --launch-skip 1 --launch-count 1 python3 $S/ncu_targets.py qk > $R/ncu_qk.txt 2>&1
$NCU -k regex:quant --launch-skip 3 --launch-count 3 python3 $S/ncu_targets.py quant group > $R/ncu_quant.txt 2>&1
grep -h "T= 16384" $R/qk_norm.txt $R/quant_bench.txt
grep -h "Duration\|Issued Instructions  \|Registers Per\|Achieved Occ" $R/ncu_*.txt
tar -czf $OUT/run34.tgz -C /tmp run34 san

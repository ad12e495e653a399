#!/bin/bash
# Run 39: main at 13aaf6e (RowShape::POS spelled as POS_MAX, not GPU-run last session) plus the quantizing
# ops' unquantized output (norm_out, NORM_OUT kernels): the precompile (NVRTC 13.0, every unit, the NORM_OUT
# ones included), the whole GPU suite (four pytest processes), compute-sanitizer --quick over rms_norm_nd and
# both quantizing ops (their matrix now has norm_out cases), and what norm_out costs (norm_out_bench.py).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
S=bench/results/2026-12-01/s7
R=/tmp/run39; mkdir -p $R /tmp/san
trap 'tar -czf $OUT/run39.tgz -C /tmp run39 san' EXIT  # what ran comes back, whatever stops it
git log -1 --format=%H > $R/commit.txt 2>/dev/null
timeout 130 python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; grep -v "compiled in\|already cached" $R/precompile.txt | tail -3
files=$(grep -l "mark.gpu" tests/test_*.py | sort)
i=0; for f in $files; do g=$((i % 4)); eval "G$g=\"\${G$g:-} $f\""; i=$((i + 1)); done
start=$(date +%s)
for g in 0 1 2 3; do
  eval "fl=\$G$g"
  timeout 220 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 $fl > $R/gpu_suite_$g.txt 2>&1 &
done
wait
echo "suite: $(( $(date +%s) - start )) s" > $R/gpu_suite_time.txt
cat $R/gpu_suite_time.txt
for g in 0 1 2 3; do tail -1 $R/gpu_suite_$g.txt; done
grep -h "^FAILED\|^ERROR" $R/gpu_suite_*.txt | head -20
OPS=rms_norm_nd,rms_norm_quant,fused_add_rms_norm_quant QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=110 \
  timeout 130 tools/run_sanitizers.sh /tmp/san > $R/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $R/sanitizers.txt
tail -6 $R/sanitizers.txt
timeout 80 python3 $S/norm_out_bench.py 1,16,16384 > $R/norm_out_bench.txt 2>&1
echo "bench rc=$?" >> $R/norm_out_bench.txt
cat $R/norm_out_bench.txt
timeout 60 python3 -m tools.readme_examples > $R/readme_examples.txt 2>&1; tail -4 $R/readme_examples.txt

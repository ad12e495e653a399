#!/bin/bash
# Run 31: main after merging mixed dtypes (issue 13 item 5): the precompile with the GPU machine's NVRTC 13.0,
# the whole GPU suite (four pytest processes over the GPU test files), then compute-sanitizer over the ops
# mixed dtypes touched: memcheck and initcheck over the whole matrix, racecheck and synccheck --quick.
# Outputs are tarred into one file (the device tool returns only a few files).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run31; mkdir -p $R
git log --oneline -1 > $R/commit.txt 2>/dev/null
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt
grep -v "compiled in\|already cached" $R/precompile.txt | tail -5
files=$(grep -l "mark.gpu" tests/test_*.py | sort)
i=0; for f in $files; do g=$((i % 4)); eval "G$g=\"\${G$g:-} $f\""; i=$((i + 1)); done
start=$(date +%s)
for g in 0 1 2 3; do
  eval "fl=\$G$g"
  timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 --durations=8 $fl > $R/gpu_suite_$g.txt 2>&1 &
done
wait
echo "suite: $(( $(date +%s) - start )) s" > $R/gpu_suite_time.txt
for g in 0 1 2 3; do tail -1 $R/gpu_suite_$g.txt; done
grep -h "^FAILED\|^ERROR" $R/gpu_suite_*.txt | head -20
OPS=rms_norm,rms_norm_nd,fused_add_rms_norm,layer_norm QUICK_TOOLS="racecheck synccheck" TIMEOUT=200 \
  timeout 230 tools/run_sanitizers.sh /tmp/san > $R/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $R/sanitizers.txt
cp -r /tmp/san $R/san 2>/dev/null
tail -7 $R/sanitizers.txt
tar -czf $OUT/run31.tgz -C /tmp run31

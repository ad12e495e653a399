#!/bin/bash
# Run 29: the session's merged tree: the whole GPU suite (four pytest processes over the test files, one
# GPU), the kernel-loading bench (library against module), the bench's host section before issue 15's
# changes (923cc30) and now, and the four sanitizers (--quick) over the new variants' families.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
ROOT=$(pwd)
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
tail -1 $OUT/precompile.txt
files=$(grep -l "mark.gpu" tests/test_*.py | sort)
i=0; for f in $files; do g=$((i % 4)); eval "G$g=\"\${G$g:-} $f\""; i=$((i + 1)); done
start=$(date +%s)
for g in 0 1 2 3; do
  eval "fl=\$G$g"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 --durations=8 $fl > $OUT/gpu_suite_$g.txt 2>&1 &
done
wait
echo "suite: $(( $(date +%s) - start )) s" > $OUT/gpu_suite_time.txt
for g in 0 1 2 3; do tail -1 $OUT/gpu_suite_$g.txt; done
timeout 60 python3 -m tools.launch_loading_bench --rounds 2 --calls 1000 --reps 7 > $OUT/loading.txt 2>&1
echo "loading rc=$?" >> $OUT/loading.txt
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms,pyrms_nopdl,torch --no-plot"
(cd .carry/before15 && PYTHONPATH=. timeout 45 python3 -m pyrms.bench $HOSTARGS --out $OUT --name host_before) > $OUT/host_before.log 2>&1
timeout 45 python3 -m pyrms.bench $HOSTARGS --out $OUT --name host_after > $OUT/host_after.log 2>&1
OPS=${SAN_OPS:-rms_norm_quant,fused_add_rms_norm_quant,fused_add_rms_norm} QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=100 \
  timeout 115 tools/run_sanitizers.sh /tmp/san > $OUT/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $OUT/sanitizers.txt
cp /tmp/san/summary.txt /tmp/san/environment.txt $OUT/ 2>/dev/null
tail -7 $OUT/sanitizers.txt

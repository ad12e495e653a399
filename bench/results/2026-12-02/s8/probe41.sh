#!/bin/bash
# Run 41: main at df0cd64 plus this session's fixes of run 39's failures (the rms_norm twin's NaN is the GPU's
# one NaN; two test mistakes in test_torch_gpu.py): the precompile (NVRTC 13.0, every unit), the whole GPU suite
# (four pytest processes), compute-sanitizer --quick over both quantizing ops (their norm_out cases failed the
# twin in run 39, with 0 sanitizer errors), and issue 15's host section: now, before issue 15 (923cc30,
# .carry/before15), now, adjacent under one machine state.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run41; mkdir -p $R /tmp/san
trap 'tar -czf $OUT/run41.tgz -C /tmp run41 san' EXIT  # what ran comes back, whatever stops it
git log -1 --format=%H > $R/commit.txt 2>/dev/null; git status --short > $R/tree_changes.txt 2>/dev/null
timeout 150 python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; tail -2 $R/precompile.txt
files=$(grep -l "mark.gpu" tests/test_*.py | sort)
i=0; for f in $files; do g=$((i % 4)); eval "G$g=\"\${G$g:-} $f\""; i=$((i + 1)); done
start=$(date +%s)
for g in 0 1 2 3; do
  eval "fl=\$G$g"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 $fl > $R/gpu_suite_$g.txt 2>&1 &
done
wait
echo "suite: $(( $(date +%s) - start )) s" > $R/gpu_suite_time.txt
cat $R/gpu_suite_time.txt
for g in 0 1 2 3; do tail -1 $R/gpu_suite_$g.txt; done
grep -h "^FAILED\|^ERROR\|^E  .*differ" $R/gpu_suite_*.txt | head -20
OPS=rms_norm_quant,fused_add_rms_norm_quant QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=100 \
  timeout 120 tools/run_sanitizers.sh /tmp/san > $R/sanitizers.txt 2>&1
echo "sanitizers rc=$?" >> $R/sanitizers.txt
tail -5 $R/sanitizers.txt | cut -c1-400
HOPS="--ops rms_norm,fused_add_rms_norm,layer_norm,rms_norm_backward"
(cd .carry/before15 && timeout 60 python3 -m pyrms.precompile --arch sm_90 --jobs 16 $HOPS > /dev/null 2>&1)
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms --no-plot"
timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after_1 > $R/host_after_1.log 2>&1
(cd .carry/before15 && timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_before > $R/host_before.log 2>&1)
timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after_2 > $R/host_after_2.log 2>&1
for f in $R/host_after_1.txt $R/host_before.txt $R/host_after_2.txt; do echo "== $f"; grep -A9 "^Host time per call" $f | tail -8; done

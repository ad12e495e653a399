#!/bin/bash
# Run 42: the tree after this session's host-path change (pyrms.Tensor operands: one N-D test per call, the
# 2-D collapse without its loop, the adapter's Tensor case inline) on top of run 41's: the precompile, the whole
# GPU suite (four processes), and the host section interleaved: now, before issue 15 (923cc30, .carry/before15),
# now, before, now (the machine's floor drifts between runs, so adjacent pairs and ratios to the bare launch).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run42; mkdir -p $R
trap 'tar -czf $OUT/run42.tgz -C /tmp run42' EXIT
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
HOPS="--ops rms_norm,fused_add_rms_norm,layer_norm,rms_norm_backward"
(cd .carry/before15 && timeout 60 python3 -m pyrms.precompile --arch sm_90 --jobs 16 $HOPS > /dev/null 2>&1)
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms --no-plot"
for run in after_1 before_1 after_2 before_2 after_3; do
  case $run in
    after*) timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_$run > $R/host_$run.log 2>&1 ;;
    before*) (cd .carry/before15 && timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_$run > $R/host_$run.log 2>&1) ;;
  esac
  echo "== $run"; grep -A9 "^Host time per call" $R/host_$run.txt | tail -8
done

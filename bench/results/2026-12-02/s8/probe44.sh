#!/bin/bash
# Run 44: tools.bench_qk_norm with torch.compile allowed one specialization per shape (runs 21 to 43 passed
# dynamo's recompile limit of 8 at the fourth k row, after which the torch.compile column was torch eager's).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run44; mkdir -p $R
trap 'tar -czf $OUT/run44.tgz -C /tmp run44' EXIT
timeout 120 python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,rms_norm_nd --dtypes bfloat16 > $R/precompile.txt 2>&1; tail -n 1 $R/precompile.txt
timeout 300 python3 -m tools.bench_qk_norm --reps 11 --json $R/qk_norm.json > $R/qk_norm.txt 2>&1
echo "bench rc=$?" >> $R/qk_norm.txt
cat $R/qk_norm.txt

#!/bin/bash
# Run 43 (right after run 42, on the warm machine and its compile cache): the benchmark tools after their shared
# timing loop (pyrms.bench.timing.median_us_each; the output must read as before): the quantizing ops at decode
# sizes and 16384x5120 against torch (eager and torch.compile, the pair and fused), issue 14's benchmark rows, and
# QK-norm.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run43; mkdir -p $R
trap 'tar -czf $OUT/run43.tgz -C /tmp run43' EXIT
git log -1 --format=%H > $R/commit.txt 2>/dev/null
timeout 90 python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $R/precompile.txt 2>&1; tail -1 $R/precompile.txt
timeout 200 python3 -m tools.bench_quant --tokens 1,16,16384 --reps 11 --json $R/quant_bench.json > $R/quant_bench.txt 2>&1
echo "bench rc=$?" >> $R/quant_bench.txt
timeout 150 python3 -m tools.bench_qk_norm --reps 11 --json $R/qk_norm.json > $R/qk_norm.txt 2>&1
echo "bench rc=$?" >> $R/qk_norm.txt
grep -h "T= 16384\|16384" $R/quant_bench.txt | head -20
tail -3 $R/quant_bench.txt $R/qk_norm.txt

#!/bin/bash
# Run 40 (the second call, after probe39.sh's suite): the benchmark tools after their shared timing loop
# (pyrms.bench.timing.median_us_each, this session's refactor: the output must read as before), the quantizing
# ops at decode and 16384 rows, QK-norm, and pyrms.bench's host section (the launch path after this session's
# Python changes: Prepared's norm_out slot, the arrays for out and scales).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run40; mkdir -p $R
trap 'tar -czf $OUT/run40.tgz -C /tmp run40' EXIT
timeout 170 python3 -m tools.bench_quant --tokens 1,16,16384 --reps 11 --json $R/quant_bench.json > $R/quant_bench.txt 2>&1
echo "bench rc=$?" >> $R/quant_bench.txt
timeout 110 python3 -m tools.bench_qk_norm --reps 11 --json $R/qk_norm.json > $R/qk_norm.txt 2>&1
echo "bench rc=$?" >> $R/qk_norm.txt
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms --no-plot"
timeout 60 python3 -m pyrms.bench $HOSTARGS --out $R --name host > $R/bench_host.log 2>&1
echo "bench rc=$?" >> $R/bench_host.log
grep -h "T= 16384\|T=     1" $R/quant_bench.txt $R/qk_norm.txt | head -30
grep -A9 "^Host time per call" $R/host.txt | tail -8

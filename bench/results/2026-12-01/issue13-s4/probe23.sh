#!/bin/bash
# Run 23: the ALIGNED packed kernel; the whole GPU suite; the QK-norm bench.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?" >> $OUT/gpu_suite.txt
timeout 200 python3 tools/bench_qk_norm.py --tokens 1,16,128,1024,4096,16384 --reps 11 --json $OUT/qk_norm.json > $OUT/qk_norm.txt 2>&1
echo "bench rc=$?" >> $OUT/qk_norm.txt

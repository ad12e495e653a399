#!/bin/bash
# Run 22 (issue 13, session 4): K rows per packed segment; tuning K; the whole GPU suite; the QK-norm bench.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
timeout 150 python3 tools/bench_qk_norm.py --tokens 128,1024,4096,16384 --reps 9 --only-pyrms --segment-rows 1,2,4 > $OUT/tune_k.txt 2>&1
echo "tune rc=$?" >> $OUT/tune_k.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?" >> $OUT/gpu_suite.txt

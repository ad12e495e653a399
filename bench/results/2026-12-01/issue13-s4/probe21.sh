#!/bin/bash
# Run 21 (issue 13, session 4): N-D rows, weight per outer row, packed short rows; then the QK-norm bench.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
timeout 240 python3 -m pytest -q -p no:cacheprovider -x tests/test_rms_norm_nd_gpu.py > $OUT/nd_tests.txt 2>&1
echo "nd rc=$?" >> $OUT/nd_tests.txt
timeout 200 python3 tools/bench_qk_norm.py --tokens 1,16,128,1024,4096,16384 --reps 11 --json $OUT/qk_norm.json > $OUT/qk_norm.txt 2>&1
echo "bench rc=$?" >> $OUT/qk_norm.txt

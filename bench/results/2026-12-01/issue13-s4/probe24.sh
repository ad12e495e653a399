#!/bin/bash
# Run 24: after merging the weightless backward: the whole GPU suite; memcheck over rms_norm_nd's and both backward ops' quick matrix.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?" >> $OUT/gpu_suite.txt
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m tools.sanitize_all --ops rms_norm_nd --quick > $OUT/memcheck_nd.txt 2>&1
echo "memcheck rc=$?" >> $OUT/memcheck_nd.txt

#!/bin/bash
# Run 26: after merging quant-kernel (issue 14) and cheapening the weightless backward check: the
# quantizing ops' GPU tests, then the whole GPU suite, with the slowest tests named.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
git log --oneline -1 > $OUT/commit.txt
python3 -m pyrms.precompile --arch sm_90 --jobs 16 > $OUT/precompile.txt 2>&1
tail -1 $OUT/precompile.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu --durations=10 tests/test_rms_norm_quant_gpu.py > $OUT/quant_tests.txt 2>&1
echo "quant rc=$?" >> $OUT/quant_tests.txt
tail -3 $OUT/quant_tests.txt
timeout 380 python3 -m pytest -q -p no:cacheprovider -m gpu --durations=25 tests/ --ignore=tests/test_rms_norm_quant_gpu.py > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?" >> $OUT/gpu_suite.txt

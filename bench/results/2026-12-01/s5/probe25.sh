#!/bin/bash
# Run 25: why the whole GPU suite stalled at 17 % in run 24: the weightless backward tests alone, a traceback after 60 s in any one test.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/.."
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm_backward,layer_norm_backward > $OUT/precompile.txt 2>&1
timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu -x -o faulthandler_timeout=60 --durations=15 tests/test_backward_weightless_gpu.py > $OUT/weightless.txt 2>&1
echo "weightless rc=$?" >> $OUT/weightless.txt
nvidia-smi --query-gpu=name,utilization.gpu --format=csv >> $OUT/weightless.txt

#!/bin/bash
# Run 35: as run 33, on d331399 (only d2's power-of-two fast path, and the full-mask butterfly; inv_rms
# unchanged): the N-D GPU tests, the QK-norm bench
# (pyrms only), and Nsight Compute's instruction count of QK-norm's q at 16384 tokens.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
S=bench/results/2026-12-01/s6
R=/tmp/run35; mkdir -p $R
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,rms_norm_nd > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; tail -2 $R/precompile.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_rms_norm_nd_gpu.py tests/test_random_check_gpu.py > $R/nd_tests.txt 2>&1 &
timeout 60 python3 -m tools.bench_qk_norm --tokens 128,1024,4096,16384 --reps 11 --only-pyrms > $R/qk_pyrms.txt 2>&1
wait
timeout 60 ncu --section SpeedOfLight --section InstructionStats --section LaunchStats -k regex:rms_norm_nd_kernel --launch-skip 1 --launch-count 1 python3 $S/ncu_targets.py qk > $R/ncu_qk.txt 2>&1
tail -2 $R/nd_tests.txt; grep "T=" $R/qk_pyrms.txt; grep "Duration\|Issued Instructions  \|Registers Per\|Compute (SM)\|DRAM Through" $R/ncu_qk.txt
tar -czf $OUT/run35.tgz -C /tmp run35

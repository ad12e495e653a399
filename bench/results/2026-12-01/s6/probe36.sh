#!/bin/bash
# Run 36: A/B of launch shapes before the final run. The tree (main: packed (8, 2) rows, the quantizing
# kernels' y once) against make_variants.py's copies: qk16 and qkmin6 timed with bench_qk_norm --only-pyrms,
# quantmin2 with Nsight Compute (ncu_targets.py quant: rms_norm, static, per_token, per_group). The N-D and
# quant GPU tests run on the tree.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
ROOT=$(pwd); S=$ROOT/bench/results/2026-12-01/s6
R=/tmp/run36; mkdir -p $R
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,rms_norm_nd,rms_norm_quant > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; tail -2 $R/precompile.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_rms_norm_nd_gpu.py tests/test_rms_norm_quant_gpu.py tests/test_random_check_gpu.py > $R/tests.txt 2>&1 &
QK="python3 -m tools.bench_qk_norm --tokens 1024,4096,16384 --reps 11 --only-pyrms"
timeout 60 $QK > $R/qk_tree.txt 2>&1
NCU="ncu --section SpeedOfLight --section InstructionStats --section LaunchStats --section Occupancy"
timeout 60 $NCU -k regex:rms_norm --launch-skip 4 --launch-count 4 python3 $S/ncu_targets.py quant group > $R/ncu_quant_tree.txt 2>&1
wait
for v in qk16 qkmin6 quantmin2; do
  python3 $S/make_variants.py $ROOT /tmp/v_$v $v
  (cd /tmp/v_$v && PYRMS_CACHE_DIR=/tmp/cache_$v python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,rms_norm_nd,rms_norm_quant > $R/precompile_$v.txt 2>&1)
done
for v in qk16 qkmin6; do (cd /tmp/v_$v && PYRMS_CACHE_DIR=/tmp/cache_$v timeout 60 $QK > $R/qk_$v.txt 2>&1); done
(cd /tmp/v_quantmin2 && PYRMS_CACHE_DIR=/tmp/cache_quantmin2 timeout 60 $NCU -k regex:rms_norm --launch-skip 4 --launch-count 4 python3 $S/ncu_targets.py quant group > $R/ncu_quant_quantmin2.txt 2>&1)
tail -2 $R/tests.txt
grep -H "T=" $R/qk_*.txt
for f in $R/ncu_quant_*.txt; do echo "== $f"; grep "rms_norm.*quant\|  void\|Duration\|Issued Instructions  \|Registers Per\|Achieved Occ" $f | sed 's/(T2 \*.*//'; done
tar -czf $OUT/run36.tgz -C /tmp run36

#!/bin/bash
# Run 45 (the session's last device time): the tree after the quantizing ops' array readers moved to
# pyrms/ops/_quant_arrays.py: the quantizing ops' GPU tests (test_rms_norm_quant_gpu.py, and test_torch_gpu.py's
# quant tests); then a throwaway timing experiment: quant_variants.py in the tree and in make_quant_variants.py's
# copies (nonan: fp8's conversion without its NaN select; mul: multiply by 1/s instead of dividing).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
ROOT=$(pwd); S=$ROOT/bench/results/2026-12-02/s8
R=/tmp/run45; mkdir -p $R
trap 'tar -czf $OUT/run45.tgz -C /tmp run45' EXIT
git status --short > $R/tree_changes.txt 2>/dev/null
Q="--ops rms_norm_quant,fused_add_rms_norm_quant"
timeout 100 python3 -m pyrms.precompile --arch sm_90 --jobs 16 $Q > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt; tail -n 2 $R/precompile.txt
timeout 130 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_rms_norm_quant_gpu.py tests/test_torch_gpu.py -k "quant" > $R/tests.txt 2>&1 &
for v in nonan mul; do
  python3 $S/make_quant_variants.py $ROOT /tmp/qv_$v $v
  (cd /tmp/qv_$v && PYRMS_CACHE_DIR=/tmp/cache_$v timeout 90 python3 -m pyrms.precompile --arch sm_90 --jobs 6 $Q --dtypes bfloat16 > $R/precompile_$v.txt 2>&1) &
done
wait
tail -n 1 $R/tests.txt; grep -h "^FAILED" $R/tests.txt | head -10
tail -n 1 $R/precompile_nonan.txt $R/precompile_mul.txt
timeout 40 python3 $S/quant_variants.py tree > $R/variants.txt 2>&1
for v in nonan mul; do (cd /tmp/qv_$v && PYRMS_CACHE_DIR=/tmp/cache_$v timeout 40 python3 $S/quant_variants.py $v >> $R/variants.txt 2>&1); done
timeout 40 python3 $S/quant_variants.py tree >> $R/variants.txt 2>&1
cat $R/variants.txt

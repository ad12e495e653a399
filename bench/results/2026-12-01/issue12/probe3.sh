set -u
O=$OUT/run3; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_norm_backward_gpu.py tests/test_pdl_gpu.py tests/test_operands_gpu.py -k "not torch" > $O/tests.log 2>&1; tail -3 $O/tests.log
C=128/4,128/4x2e,128/4x4e,160/4,160/4x2e,160/4x4e,256/4,256/4x2e,256/4x4e,512/4,512/4x2e
for pdl in "" "--pdl"; do
timeout 150 python3 tools/tune_rms_norm.py --shapes 1x4096,1x5120,1x8192,1x16384,32x5120,256x5120,1024x5120,1024x4096 --configs $C --reps 10 $pdl > $O/tune_decode${pdl}.txt 2>&1
cat $O/tune_decode${pdl}.txt
done
timeout 100 python3 tools/tune_backward.py --shape 16384x5120 --configs 128/0/16,160/0/16 > $O/tune_backward.txt 2>&1; cat $O/tune_backward.txt

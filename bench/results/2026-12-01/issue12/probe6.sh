O=$OUT/run6; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
timeout 250 python3 -m pytest -q -p no:cacheprovider -x tests/test_rms_norm_gpu.py tests/test_fused_add_layer_norm_gpu.py tests/test_pdl_gpu.py tests/test_operands_gpu.py -k "not torch" > $O/tests.log 2>&1; tail -2 $O/tests.log
C=128/4x4e,128/4x4ea,160/4x4e,160/4x4ea,256/4x4e,256/4x4ea,512/4x2e,512/4x2ea,160/4
for pdl in "" "--pdl"; do
timeout 100 python3 tools/tune_rms_norm.py --shapes 1x4096,1x5120,1x8192,1x16384,5x5120,32x5120,128x5120 --configs $C --reps 10 $pdl > $O/tune_decode${pdl}.txt 2>&1
cat $O/tune_decode${pdl}.txt
done

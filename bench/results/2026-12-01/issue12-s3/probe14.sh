O=$OUT/run14; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_norm_backward_gpu.py > $O/tests.log 2>&1; tail -1 $O/tests.log
timeout 200 python3 tools/tune_backward.py --shapes 32x5120,1024x5120,2048x5120,4096x5120,16384x5120 --configs planned,128/0/16,128/0/1,256/0/1,256/0/16 > $O/tune_backward.txt 2>&1; grep -v "^pyrms:" $O/tune_backward.txt | sed 's/: planned NormBackwardPlan.*block=\([0-9]*\).*/ (planned block \1)/'
timeout 100 python3 -m pyrms.bench --ops rms_norm_backward --shapes 32x5120,1024x5120 --impls pyrms,torch --no-floor --no-host --no-graphs --out $O --name bwd --no-plot > $O/bench.log 2>&1; grep -A5 "device time per launch, us" $O/bwd.txt; grep backward $O/bwd.txt | grep -E "PASS|FAIL"
timeout 60 python3 tools/tune_backward.py --layer-norm --shapes 32x5120,16384x5120 --configs planned,128/0/16,128/0/1 > $O/tune_backward_ln.txt 2>&1; grep -v "^pyrms:" $O/tune_backward_ln.txt | sed 's/: planned NormBackwardPlan.*block=\([0-9]*\).*/ (planned block \1)/'
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_rms_norm_gpu.py tests/test_fused_add_layer_norm_gpu.py -k "not torch" > $O/tests_fwd.log 2>&1; tail -1 $O/tests_fwd.log

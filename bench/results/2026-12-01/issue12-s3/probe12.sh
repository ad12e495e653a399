O=$OUT/run12; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
bash tools/gpu_session.sh $O "suite random" 
grep -E "passed|failed|error" $O/random_check.log | tail -2
timeout 120 python3 tools/tune_backward.py --shapes 32x5120,256x5120,257x5120,1024x5120,16384x5120 --configs planned,128/0/16,128/0/1,160/0/1,256/0/1 > $O/tune_backward.txt 2>&1; cat $O/tune_backward.txt
timeout 60 python3 tools/tune_backward.py --layer-norm --shapes 32x5120,256x5120 --configs planned,128/0/16,128/0/1 > $O/tune_backward_ln.txt 2>&1; cat $O/tune_backward_ln.txt
timeout 150 python3 -m pyrms.bench --ops fused_add_rms_norm,rms_norm_backward --shapes 32x5120,16384x5120 --impls pyrms,torch,compile --no-floor --no-host --no-graphs --out $O --name extra --no-plot > $O/bench.log 2>&1; grep -A6 "device time per launch, us" $O/extra.txt; grep -E "fused_add|backward" $O/extra.txt | grep -E "PASS|FAIL"

O=$OUT/run11; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
(timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_norm_backward_gpu.py tests/test_pdl_gpu.py -k "backward or Backward" > $O/tests.log 2>&1; tail -3 $O/tests.log) &
wait
timeout 300 python3 .carry/bwd_ablate.py > $O/ablate.txt 2>&1; cat $O/ablate.txt | grep -v "^pyrms: compiled"
timeout 120 python3 -m pyrms.bench --ops rms_norm_backward --shapes 32x5120,256x5120,16384x5120 --impls pyrms,torch,compile --no-floor --no-host --no-graphs --out $O --name bwd --no-plot > $O/bench.log 2>&1; grep -A8 "device time per launch" $O/bwd.txt | head -30

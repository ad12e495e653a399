O=$OUT/run15; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
bash tools/gpu_session.sh $O "suite"
OPS=rms_norm_backward,layer_norm_backward TIMEOUT=200 timeout 240 bash tools/run_sanitizers.sh $O/san > $O/sanitizers.log 2>&1; echo "sanitizers rc=$?"; tail -8 $O/sanitizers.log
cp $O/san/summary.txt $O/sanitizer_summary.txt 2>/dev/null; tar czf $O/sanitizers.tar.gz -C $O san 2>/dev/null; rm -rf $O/san
timeout 120 python3 -m pyrms.bench --ops fused_add_rms_norm,rms_norm_backward --shapes 32x5120,16384x5120 --impls pyrms,torch,compile --no-floor --no-host --no-graphs --out $O --name extra --no-plot > $O/bench.log 2>&1; grep -A6 "device time per launch, us" $O/extra.txt; grep -E "fused_add|backward" $O/extra.txt | grep -E "PASS|FAIL"

O=$OUT/run16; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
timeout 60 python3 tools/sanitize_all.py --precompile --ops rms_norm,fused_add_rms_norm --jobs 16 > $O/precompile.log 2>&1; tail -1 $O/precompile.log
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_weight_variants_gpu.py tests/test_rms_norm_gpu.py tests/test_fused_add_layer_norm_gpu.py tests/test_pdl_gpu.py > $O/tests.log 2>&1; tail -3 $O/tests.log
OPS=rms_norm,fused_add_rms_norm QUICK_TOOLS="memcheck racecheck initcheck synccheck" TIMEOUT=110 timeout 130 bash tools/run_sanitizers.sh $O/san > $O/sanitizers.log 2>&1; echo "sanitizers rc=$?"; tail -6 $O/sanitizers.log
cp $O/san/summary.txt $O/sanitizer_summary.txt 2>/dev/null; tar czf $O/sanitizers.tar.gz -C $O san 2>/dev/null; rm -rf $O/san
timeout 60 python3 -m pyrms.bench --shapes 1x5120,16384x5120 --impls pyrms --ops rms_norm,fused_add_rms_norm --no-floor --no-host --no-graphs --rounds 2 --out $O --name fwd --no-plot > $O/bench.log 2>&1; grep -A5 "device time per launch, us" $O/fwd.txt

O=$OUT/run7; mkdir -p $O
bash tools/gpu_session.sh $O "suite random" > $O/session.txt 2>&1; cat $O/session.txt
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
timeout 330 python3 -m pyrms.bench --shapes 1x4096,5x4096,32x4096,128x4096,1x5120,5x5120,32x5120,128x5120,1x8192,5x8192,32x8192,128x8192,1024x4096,4096x16384,16384x5120,16384x8192,32768x8192 --no-graphs --out $O --name sweep > $O/sweep.stdout 2> $O/sweep.stderr; echo bench rc=$?
grep -B2 -A40 "^Targets" $O/sweep.txt | head -80

O=$OUT/run17; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
{ nvidia-smi -L; python3 --version; } > $O/environment.txt 2>&1
timeout 40 python3 -m pyrms.precompile --jobs 16 > $O/precompile.log 2>&1; tail -1 $O/precompile.log
timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider > $O/gpu_suite.log 2>&1; echo "suite rc=$?"; tail -4 $O/gpu_suite.log

#!/usr/bin/env bash
# One device-tool call's worth of checks, in order: the whole GPU suite in one process (torch tests
# included), the demo against the nvcc-built C++ program, and the host-overhead table. Each step's
# output goes to $OUT; a failing step does not stop the next. Usage: bash tools/gpu_session.sh OUT [STEPS]
#
# Steps for a fresh machine (the runs of 2026-12-01/02 wrote these into every probe):
#   precompile  every kernel into the cache first, one NVRTC process per core (PRECOMPILE_OPS: --ops, else all)
#   suites      the whole GPU suite as SUITE_PROCS [4] pytest processes over the test files, round robin,
#               into gpu_suite_K.txt (about 100 s on the H200 machine; their own times add up to about 230 s),
#               then the benchmark's tests (tests/bench: they time the GPU, and a GPU shared with the other
#               processes once gave a negative after-GEMM time) alone, into gpu_suite_timing.txt
#   sanitizers  tools/run_sanitizers.sh into $OUT/san, every tool --quick over SANITIZE_OPS [all ops]
#   slow        the CPU tests marked slow (the plain pytest run leaves them out; -m gpu has every GPU test,
#               slow or not) with this machine's NVRTC, into slow_tests.txt
set -u
OUT="${1:?output directory}"; STEPS="${2:-suite demo host}"
mkdir -p "$OUT"
# The checkout first; a PYTHONPATH given is kept after it (tools/cuda12_gpu.sh's CUDA 12 wheels).
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYRMS_CACHE_DIR="${PYRMS_CACHE_DIR:-/tmp/pyrms-cache}"
{ nvidia-smi -L; python3 --version; python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"; } > "$OUT/environment.txt" 2>&1
for step in $STEPS; do
    start=$(date +%s)
    case "$step" in
        suite) timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider > "$OUT/gpu_suite.log" 2>&1 ;;
        precompile) timeout 300 python3 -m pyrms.precompile --jobs "$(nproc)" ${PRECOMPILE_OPS:+--ops "$PRECOMPILE_OPS"} \
                        > "$OUT/precompile.txt" 2>&1; tail -n 1 "$OUT/precompile.txt" ;;
        suites) procs="${SUITE_PROCS:-4}"; i=0; pids=""
                for f in $(grep -rl --include="test_*.py" "mark.gpu" tests | grep -v "^tests/bench/" | sort); do eval "group_$((i % procs))+=\" $f\""; i=$((i + 1)); done
                for ((k = 0; k < procs; k++)); do
                    eval "files=\${group_$k:-}"
                    [ -n "$files" ] || continue
                    timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu --maxfail=30 $files > "$OUT/gpu_suite_$k.txt" 2>&1 &
                    pids+=" $!"
                done
                failed=0; for pid in $pids; do wait "$pid" || failed=1; done
                timing=$(grep -rl --include="test_*.py" "mark.gpu" tests/bench | sort)
                if [ -n "$timing" ]; then
                    timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu $timing > "$OUT/gpu_suite_timing.txt" 2>&1 || failed=1
                fi
                for ((k = 0; k < procs; k++)); do tail -n 1 "$OUT/gpu_suite_$k.txt" 2>/dev/null; done
                tail -n 1 "$OUT/gpu_suite_timing.txt" 2>/dev/null
                grep -h "^FAILED\|^ERROR" "$OUT"/gpu_suite_*.txt | head -20; (exit $failed) ;;
        slow) timeout 400 python3 -m pytest -q -p no:cacheprovider -m "slow and not gpu" > "$OUT/slow_tests.txt" 2>&1
              rc=$?; tail -n 1 "$OUT/slow_tests.txt"; (exit $rc) ;;
        sanitizers) QUICK_TOOLS="memcheck racecheck initcheck synccheck" OPS="${SANITIZE_OPS:-}" TIMEOUT=150 \
                        timeout 200 tools/run_sanitizers.sh "$OUT/san" > "$OUT/sanitizers.txt" 2>&1
                    rc=$?; tail -n 5 "$OUT/sanitizers.txt" | cut -c1-300; (exit $rc) ;;
        demo) timeout 120 python3 -m tools.compare_seed_demo .carry/000_a564d65ec8370cc8.txt --seed 42 --out "$OUT/demo" > "$OUT/demo_compare.log" 2>&1
              diff "$OUT/demo/cpp.txt" "$OUT/demo/demo.txt" > "$OUT/demo_diff.txt" 2>&1; echo "diff rc=$?" >> "$OUT/demo_diff.txt" ;;
        host) timeout 200 python3 -m pyrms.bench --no-sweep --no-floor --no-graphs --out "$OUT" --name host > "$OUT/host.stdout" 2>&1
              grep -A30 "^Host time per call" "$OUT/host.txt" | sed '/^$/q' ;;
        floor) timeout 300 python3 -m pyrms.bench --shapes 1x4096,1x5120,1x8192 --impls pyrms,pyrms_nopdl --no-host --no-graphs \
                   --out "$OUT" --name floor > "$OUT/floor.stdout" 2>&1
               grep -A16 "^Launch floor" "$OUT/floor.txt" | sed '/^$/q'; grep -A6 "decode shapes against" "$OUT/floor.txt" ;;
        random) timeout 300 python3 -m tools.random_check --seed 2026 --count 5000 --precompile --out "$OUT/random_check.json" > "$OUT/random_check.log" 2>&1 ;;
        readme) timeout 300 python3 -m tools.readme_examples > "$OUT/readme_examples.txt" 2>&1; tail -3 "$OUT/readme_examples.txt" ;;
        bench) timeout 200 python3 -m pyrms.bench --quick --out "$OUT" --name quick > "$OUT/bench_quick.stdout" 2>&1 ;;
    esac
    echo "$step rc=$? $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.txt"
done
tail -3 "$OUT/gpu_suite.log" 2>/dev/null
cat "$OUT/demo_diff.txt" 2>/dev/null

#!/usr/bin/env bash
# Every pyrms kernel (tools/sanitize_all.py) under each compute-sanitizer tool: memcheck, racecheck,
# initcheck and synccheck, each with --error-exitcode 3.
#
#   tools/run_sanitizers.sh OUT_DIR
#
# First compiles every kernel the matrix needs into the disk cache (PYRMS_CACHE_DIR), in parallel and
# outside the sanitizers; then runs each tool over the matrix split into interleaved shards
# (sanitize_all.py --shard K/N), all shards of all tools at once, each its own compute-sanitizer
# process with its own connection port. Writes OUT_DIR/TOOL.K.log (+ .rc, .seconds), precompile.log,
# environment.txt, and summary.txt / summary.json (tools/sanitizer_summary.py): per tool the launches
# checked, checks failed, and the errors of the sanitizer's own "ERROR SUMMARY" / "RACECHECK SUMMARY"
# lines. Exit status 0 only if every shard ran to the end with 0 failed checks and 0 sanitizer errors.
#
# Environment (defaults in brackets):
#   TOOLS        tools to run [memcheck racecheck initcheck synccheck]
#   QUICK_TOOLS  tools that get sanitize_all.py --quick (misalignments 0, 1, VEC-1 only) [none]
#   OPS          sanitize_all.py --ops [all]
#   SHARDS_MEMCHECK, SHARDS_RACECHECK, SHARDS_INITCHECK, SHARDS_SYNCCHECK  processes per tool [3 11 3 3]
#                (racecheck is about 5x slower than the others: 11 processes finished the full matrix
#                in 154 s on the H200 machine's 16 cores)
#   PARALLEL     1: all shards at once; 0: one after another [1]
#   TIMEOUT      seconds each process may run before it is stopped [500]
#   PYTHON [python3]  SANITIZER [compute-sanitizer]  PORT  first connection port [49152]
set -u

OUT=${1:?usage: tools/run_sanitizers.sh OUT_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
SAN=${SANITIZER:-compute-sanitizer}
if ! command -v "$SAN" > /dev/null && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    SAN=/usr/local/cuda/bin/compute-sanitizer
fi
TOOLS=${TOOLS:-memcheck racecheck initcheck synccheck}
QUICK_TOOLS=${QUICK_TOOLS:-}
OPS=${OPS:-all}
TIMEOUT=${TIMEOUT:-500}
PARALLEL=${PARALLEL:-1}
PORT=${PORT:-49152}
declare -A SHARDS=([memcheck]=${SHARDS_MEMCHECK:-3} [racecheck]=${SHARDS_RACECHECK:-11}
                   [initcheck]=${SHARDS_INITCHECK:-3} [synccheck]=${SHARDS_SYNCCHECK:-3})

mkdir -p "$OUT" || exit 2
rm -f "$OUT"/{memcheck,racecheck,initcheck,synccheck}.*.{log,rc,seconds}
start=$(date +%s)
{
    echo "tools/run_sanitizers.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "sanitizer: $("$SAN" --version 2>&1 | grep -i -m1 version || echo "$SAN not found")"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)"
    echo "python: $("$PY" -c 'import sys, cuda.bindings as b; print(sys.version.split()[0], "cuda-bindings", b.__version__)' 2>&1)"
    echo "tools: $TOOLS; --quick for: ${QUICK_TOOLS:-none}; ops: $OPS; processes: memcheck ${SHARDS[memcheck]}, racecheck ${SHARDS[racecheck]}, initcheck ${SHARDS[initcheck]}, synccheck ${SHARDS[synccheck]}; timeout ${TIMEOUT} s each"
} > "$OUT/environment.txt"

if ! "$PY" -m tools.sanitize_all --precompile --ops "$OPS" > "$OUT/precompile.log" 2>&1; then
    echo "run_sanitizers: the precompile step failed (see $OUT/precompile.log):"
    tail -n 20 "$OUT/precompile.log"
    exit 2
fi
tail -n 1 "$OUT/precompile.log"

# Distinct connection ports keep the concurrent sanitizers apart, and a long launch timeout lets a
# loaded machine start Python in time; each option only where this compute-sanitizer lists it.
options_help=$("$SAN" --help 2>&1)
port_option() { case "$options_help" in *--port*) echo "--port=$1" ;; esac; }
timeout_option=""
case "$options_help" in *--launch-timeout*) timeout_option="--launch-timeout=120" ;; esac

run_shard() {  # TOOL K N QUICK_FLAG PORT
    local tool=$1 k=$2 n=$3 flag=$4 port=$5 t0
    t0=$(date +%s)
    # timeout signals the whole process group: the sanitizer and the Python process under it.
    # shellcheck disable=SC2046 # the options are words or nothing
    timeout --kill-after=15 "$TIMEOUT" "$SAN" --tool "$tool" --error-exitcode 3 $(port_option "$port") $timeout_option \
        "$PY" -m tools.sanitize_all --ops "$OPS" $flag --verbose --shard "$k/$n" > "$OUT/$tool.$k.log" 2>&1
    echo $? > "$OUT/$tool.$k.rc"
    echo $(( $(date +%s) - t0 )) > "$OUT/$tool.$k.seconds"
}

port=$PORT
for tool in $TOOLS; do
    n=${SHARDS[$tool]:-1}
    flag=""
    case " $QUICK_TOOLS " in *" $tool "*) flag="--quick" ;; esac
    for (( k = 0; k < n; k++ )); do
        if [ "$PARALLEL" = 1 ]; then
            run_shard "$tool" "$k" "$n" "$flag" "$port" &
        else
            run_shard "$tool" "$k" "$n" "$flag" "$port"
        fi
        port=$(( port + 16 ))  # each sanitizer listens on up to 10 ports from its base
    done
done
wait
echo "elapsed: $(( $(date +%s) - start )) s for the precompile and all shards" >> "$OUT/environment.txt"
"$PY" -m tools.sanitizer_summary "$OUT"

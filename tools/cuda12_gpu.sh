#!/usr/bin/env bash
# The GPU suite with CUDA 12's oldest NVRTC (12.0) and cuda-bindings 12.9, on a machine whose own are CUDA 13's
# and that has no network: the CUDA 12 wheels come from a folder (CU12_WHEELS, default .carry/cu12) and are
# installed into a folder of their own (CU12_TARGET) that goes on PYTHONPATH, before the system's
# site-packages. A CUBIN of NVRTC 12.0 runs on a CUDA 13 driver, so this tests the cu12 extra's code on any
# H100/H200. Each step's output goes to $OUT; a failing step stops the ones after it.
# Usage: bash tools/cuda12_gpu.sh OUT [STEPS]. Every kernel through NVRTC 12.0 is about 27 CPU-minutes on the
# 2-core CPU machine (2 to 3 minutes over 16 cores, if theirs are as fast) and the suites about 100 s, so all
# four steps should fit one 600 s device call; else "install versions precompile", then "versions suites".
#
# Steps (default: all four, in this order):
#   install     pip install --no-index --no-deps --target CU12_TARGET every wheel of CU12_WHEELS
#   versions    which cuda-bindings, cuda-pathfinder, NVRTC and headers Python imports and pyrms finds, into
#               cu12_versions.txt; fails unless they are the CUDA 12 ones from CU12_TARGET
#   precompile  every kernel for the GPU's arch with that NVRTC, one process per core (PRECOMPILE_OPS: --ops)
#   suites      tools/gpu_session.sh's suites step (the whole GPU suite, -m gpu) under the same environment
#
# The wheels (what .carry/cu12 holds; pip download --no-deps --python-version 3.12 of):
#   cuda-bindings==12.9.10 (cp312), nvidia-cuda-nvrtc-cu12==12.0.140, nvidia-cuda-runtime-cu12==12.0.146,
#   nvidia-cuda-cccl-cu12==12.5.39.post1, cuda-pathfinder==1.9.1
set -u
OUT="${1:?output directory}"; STEPS="${2:-install versions precompile suites}"
WHEELS="${CU12_WHEELS:-.carry/cu12}"
# Both under build/ (ignored, and kept between device calls while the machine stays up), so that one call
# may install and precompile and the next run the suites ("versions suites").
TARGET="${CU12_TARGET:-$PWD/build/pyrms-cu12}"
mkdir -p "$OUT"
# A cache of its own: entries are keyed by NVRTC version and headers, so sharing one would be safe, but a
# separate one shows how long this NVRTC takes over every kernel.
export PYRMS_CACHE_DIR="${PYRMS_CACHE_DIR:-$PWD/build/pyrms-cache-cu12}" PYRMS_QUIET=1
export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
# cuda-pathfinder looks for NVRTC only in site-packages (not PYTHONPATH) and tries CUDA 13's layout first, so
# it would load the system's libnvrtc.so.13 for cuda-bindings 12.9; a library already loaded is the one it
# takes, so load CUDA 12's first. The headers need nothing of the kind: pyrms takes those of NVRTC's major
# from sys.path, PYTHONPATH included.
NVRTC_SO="$TARGET/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
LD_PRELOAD_BEFORE="${LD_PRELOAD:-}"
preload() {  # once the library exists: before it, the loader would complain in every command
    [ -f "$NVRTC_SO" ] && export LD_PRELOAD="$NVRTC_SO${LD_PRELOAD_BEFORE:+:$LD_PRELOAD_BEFORE}"
}
preload

for step in $STEPS; do
    start=$(date +%s)
    case "$step" in
        install) export LD_PRELOAD="$LD_PRELOAD_BEFORE"; rm -rf "$TARGET"
                 python3 -m pip install -q --no-index --no-deps --target "$TARGET" "$WHEELS"/*.whl \
                     > "$OUT/cu12_install.txt" 2>&1
                 rc=$?
                 # The CUDA 12 wheels make nvidia/ a regular package; in the target, first on sys.path, it would hide
                 # the system's nvidia.* packages (CUDA 13's, torch's cuDNN...) from imports. A namespace merges them.
                 rm -f "$TARGET/nvidia/__init__.py"
                 ls "$WHEELS" >> "$OUT/cu12_install.txt"; preload; (exit $rc) ;;
        versions) python3 - > "$OUT/cu12_versions.txt" 2>&1 <<EOF
import os, sys
import cuda.bindings, cuda.pathfinder
from pyrms import compiler, headers
target = os.path.realpath("$TARGET")
nvrtc = compiler.nvrtc_version()
dirs = headers.include_dirs(nvrtc[0])
print("python", sys.version.split()[0])
print("cuda-bindings", cuda.bindings.__version__, cuda.bindings.__file__)
print("cuda-pathfinder", cuda.pathfinder.__version__, cuda.pathfinder.__file__)
print("NVRTC", nvrtc, cuda.pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
print("headers", *dirs)
problems = [what for what, ok in (
    ("cuda-bindings is not 12.x from the target", cuda.bindings.__version__.startswith("12.")
     and os.path.realpath(cuda.bindings.__file__).startswith(target)),
    ("NVRTC is not 12.0", nvrtc == (12, 0)),
    ("the headers are not the target's", all(str(d).startswith(target) for d in dirs))) if not ok]
print("problems:", "; ".join(problems) or "none")
sys.exit(1 if problems else 0)
EOF
                  rc=$?; cat "$OUT/cu12_versions.txt"; (exit $rc) ;;
        precompile) timeout 420 python3 -m pyrms.precompile --jobs "$(nproc)" ${PRECOMPILE_OPS:+--ops "$PRECOMPILE_OPS"} \
                        > "$OUT/cu12_precompile.txt" 2>&1
                    rc=$?; tail -n 1 "$OUT/cu12_precompile.txt"; grep -A3 FAILED "$OUT/cu12_precompile.txt" | head -20; (exit $rc) ;;
        # gpu_session.sh's own exit status is its last command's; the step's is in its steps.txt.
        suites) bash tools/gpu_session.sh "$OUT" suites; tail -n 1 "$OUT/steps.txt" | grep -q "^suites rc=0 " ;;
        *) echo "cuda12_gpu: unknown step $step (steps: install versions precompile suites)" >&2; false ;;
    esac
    rc=$?
    echo "cu12 $step rc=$rc $(( $(date +%s) - start )) s" | tee -a "$OUT/cu12_steps.txt"
    [ "$rc" -eq 0 ] || exit "$rc"
done

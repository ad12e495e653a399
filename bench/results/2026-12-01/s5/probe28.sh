#!/bin/bash
# Run 28: QK-norm (bench_qk_norm --only-pyrms) for three trees: before the fast division (exp28/old, the
# parent commit), the commit (fast division), and the commit with a grid-stride loop over rows
# (exp28/make_loop.py, a throwaway) at three grid caps.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
python3 .carry/exp28/make_loop.py "$ROOT" /tmp/loop
ARGS="--tokens 128,4096,16384 --reps 11 --only-pyrms"
(cd .carry/exp28/old && PYTHONPATH=. timeout 100 python3 -m tools.bench_qk_norm $ARGS) > $OUT/old.txt 2>&1
PYTHONPATH=. timeout 100 python3 -m tools.bench_qk_norm $ARGS > $OUT/fastdiv.txt 2>&1
for cap in 1056 2112 4224; do
  (cd /tmp/loop && PYRMS_ND_CAP=$cap PYTHONPATH=. timeout 100 python3 -m tools.bench_qk_norm $ARGS) > $OUT/loop$cap.txt 2>&1
done
for f in $OUT/*.txt; do echo "== $f"; grep -v "^copy" $f; done

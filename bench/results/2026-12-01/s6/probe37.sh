#!/bin/bash
# Run 37: the bench's host section before issue 15 (923cc30, .carry/before15) and now (main after this
# session's kernel changes), interleaved twice (before, now, before, now), for a second and third sample of
# run 32's comparison (fused add and LayerNorm read 5 % slower there, within the before run's spread).
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run37; mkdir -p $R
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,fused_add_rms_norm,layer_norm,rms_norm_backward > $R/precompile.txt 2>&1
(cd .carry/before15 && python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,fused_add_rms_norm,layer_norm,rms_norm_backward > /dev/null 2>&1)
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms,pyrms_nopdl,torch --no-plot"
for i in 1 2; do
  (cd .carry/before15 && timeout 45 python3 -m pyrms.bench $HOSTARGS --out $R --name host_before_$i) > $R/host_before_$i.log 2>&1
  timeout 45 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after_$i > $R/host_after_$i.log 2>&1
done
grep -h "^  [a-z]" $R/host_*_[12].txt | head -40
for f in $R/host_*_[12].txt; do echo "== $f"; grep -A9 "^Host time per call" $f | tail -8; done
tar -czf $OUT/run37.tgz -C /tmp run37

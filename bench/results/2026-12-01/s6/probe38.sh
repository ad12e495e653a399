#!/bin/bash
# Run 38: the bench's host section after Pointers resolves each operand's spans once (not per call), against
# the tree before issue 15 (923cc30, .carry/before15): now, before, now, adjacent under one machine state.
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
R=/tmp/run38; mkdir -p $R
OPS="--ops rms_norm,fused_add_rms_norm,layer_norm,rms_norm_backward"
python3 -m pyrms.precompile --arch sm_90 --jobs 16 $OPS > $R/precompile.txt 2>&1
(cd .carry/before15 && python3 -m pyrms.precompile --arch sm_90 --jobs 16 $OPS > /dev/null 2>&1)
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms --no-plot"
timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after_1 > $R/host_after_1.log 2>&1
(cd .carry/before15 && timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_before > $R/host_before.log 2>&1)
timeout 40 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after_2 > $R/host_after_2.log 2>&1
for f in $R/host_after_1.txt $R/host_before.txt $R/host_after_2.txt; do echo "== $f"; grep -A9 "^Host time per call" $f | tail -8; done
tar -czf $OUT/run38.tgz -C /tmp run38

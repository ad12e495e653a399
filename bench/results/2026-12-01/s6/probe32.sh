#!/bin/bash
# Run 32: benchmarks and profiles on main after the mixed-dtypes merge.
#  - issue 14: python -m tools.bench_quant (static, per_token, per_group; T = 1, 16, 16384; hidden 5120)
#  - issue 13 item 3: python -m tools.bench_qk_norm (all columns incl. pyrms.torch)
#  - issue 15: the bench's host section before issue 15 (923cc30, .carry/before15) and now, one run each
#  - Nsight Compute (--set full) of QK-norm's q (pyrms and Triton r16w4) and of rms_norm / rms_norm_quant
#    static / per_token at 16384x5120 (ncu_targets.py), and a grid-stride loop over packed rows
#    (make_loop.py, a throwaway copy) timed with bench_qk_norm --only-pyrms
set -u
export PYTHONPATH=.
cd "$(dirname "$0")/../../../.."
ROOT=$(pwd); S=bench/results/2026-12-01/s6
R=/tmp/run32; mkdir -p $R
git log --oneline -1 > $R/commit.txt 2>/dev/null
python3 -m pyrms.precompile --arch sm_90 --jobs 16 --ops rms_norm,rms_norm_nd,rms_norm_quant,fused_add_rms_norm_quant,rms_norm_backward,fused_add_rms_norm,layer_norm > $R/precompile.txt 2>&1
echo "precompile rc=$?" >> $R/precompile.txt
timeout 200 python3 -m tools.bench_quant --tokens 1,16,16384 --reps 11 --json $R/quant_bench.json > $R/quant_bench.txt 2>&1
echo "bench rc=$?" >> $R/quant_bench.txt
timeout 150 python3 -m tools.bench_qk_norm --reps 11 --json $R/qk_norm.json > $R/qk_norm.txt 2>&1
echo "bench rc=$?" >> $R/qk_norm.txt
HOSTARGS="--no-sweep --no-floor --no-graphs --host-calls 3000 --rounds 2 --impls pyrms,pyrms_nopdl,torch --no-plot"
(cd .carry/before15 && PYTHONPATH=. timeout 45 python3 -m pyrms.bench $HOSTARGS --out $R --name host_before) > $R/host_before.log 2>&1
timeout 45 python3 -m pyrms.bench $HOSTARGS --out $R --name host_after > $R/host_after.log 2>&1
NCU="timeout 90 ncu --set full --import-source no"
$NCU -k regex:"rms_norm_nd_kernel|qk_norm" --launch-skip 2 --launch-count 2 -o $R/ncu_qk python3 $S/ncu_targets.py qk > $R/ncu_qk.log 2>&1
$NCU -k regex:rms_norm --launch-skip 3 --launch-count 3 -o $R/ncu_quant python3 $S/ncu_targets.py quant > $R/ncu_quant.log 2>&1
for r in qk quant; do
  ncu -i $R/ncu_$r.ncu-rep --page details > $R/ncu_${r}_details.txt 2>&1
  ncu -i $R/ncu_$r.ncu-rep --page source --print-source sass --csv > $R/ncu_${r}_sass.csv 2>&1
done
python3 $S/make_loop.py $ROOT /tmp/exp && (cd /tmp/exp && for cap in 1056 2112; do
  PYRMS_ND_CAP=$cap PYTHONPATH=. timeout 60 python3 -m tools.bench_qk_norm --tokens 128,4096,16384 --reps 11 --only-pyrms > $R/loop$cap.txt 2>&1
done)
timeout 60 python3 -m tools.bench_qk_norm --tokens 128,4096,16384 --reps 11 --only-pyrms > $R/loop_none.txt 2>&1
grep -h "T= 16384" $R/quant_bench.txt $R/qk_norm.txt $R/loop*.txt
tail -3 $R/ncu_qk.log $R/ncu_quant.log
grep -h "Duration\|Memory Throughput\|Achieved Occupancy\|Registers Per" $R/ncu_*_details.txt | head -40
tar -czf $OUT/run32.tgz -C /tmp run32

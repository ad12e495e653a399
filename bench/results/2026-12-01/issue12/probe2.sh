set -u
O=$OUT/run2; mkdir -p $O
export PYTHONPATH=. PYRMS_CACHE_DIR=/tmp/pyrms-cache
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for v in few many; do
  timeout 120 $NCU $S -k regex:rms_norm_kernel --launch-skip 2 --launch-count 1 python3 tools/profile_launch.py --op rms_norm --shape 1x5120 --variant $v > $O/ncu_rms_1x5120_$v.txt 2>&1
done
timeout 120 $NCU $S --section SourceCounters -k regex:rms_norm_kernel --launch-skip 2 --launch-count 1 python3 tools/profile_launch.py --op seed --shape 1x5120 > $O/ncu_seed_1x5120.txt 2>&1
timeout 120 $NCU $S --section SourceCounters -k regex:rms_norm_kernel --launch-skip 2 --launch-count 1 python3 tools/profile_launch.py --op rms_norm --shape 1x5120 --variant few > $O/ncu_rms_1x5120_few_source.txt 2>&1
timeout 150 $NCU $S -k regex:rms_norm_backward_kernel --launch-skip 1 --launch-count 1 python3 tools/profile_launch.py --op rms_norm_backward --shape 16384x5120 --launches 2 > $O/ncu_backward_16384x5120.txt 2>&1
timeout 200 python3 tools/tune_backward.py --shape 16384x5120 --configs 128/0/16,160/0/16,160/0/32,160/0/64,320/0/16,160/1/16,320/1/16 > $O/tune_backward.txt 2>&1
cat $O/tune_backward.txt
for f in $O/ncu_*.txt; do echo "== $f"; grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|Compute \(SM\)|Block Size|Warp Cycles Per Issued|Issued Warp|Executed Ipc A|No Eligible" $f | head -16; done

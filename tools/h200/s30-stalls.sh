# Issue 28, twelfth round, call 2: Nsight Compute's warp-state, scheduler, occupancy and
# memory sections for the looped kernel at llama-3.1-8b B=256, 192 keys (default, ring,
# staged), to tell where a call's ~160 us go. ~3 minutes.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s30-stalls.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/n; mkdir -p $R
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 300 $NCU --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section MemoryWorkloadAnalysis --section SpeedOfLight --section LaunchStats \
  -k regex:batchlab python3 tools/h200/stall_probe.py > $R/ncu-stalls.txt 2> $R/ncu-stalls.err
echo "== ncu: exit $?"; tail -3 $R/ncu-stalls.err
grep -E "batchlab_grouped|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per" $R/ncu-stalls.txt | head -80
tar czf $OUT/n.tgz -C $OUT n

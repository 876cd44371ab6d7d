# Issue 28 item 1, the twentieth round: the row GEMM's class-warp kernel
# (row_gemm._CLASS_WARPS_SOURCE: the four K classes on four warps of a block, tiles through
# shared memory, warp tiles up to 64 x 64), the same bits as the split kernel.
#   1. row_gemm_sweep.py at 64, 128 and 256 rows: every candidate (the class-warp shapes
#      among them) against the default's bits (SWEEP SAME), then the times;
#   2. row_gemm_probe.py with BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 (every row equal at 17 M
#      from 1 to 280 against the class-warp kernel over 300 rows, bf16 and fp16);
#   3. invariant against l1 at 8B B=256, the class-warp shape $2 and the default, interleaved;
#   4. the same at llama-3.2-1b B=64 and 256 with "$2" (e.g. "1,6": from 65 rows, 17-64);
#   5. Nsight Compute: every kernel of an invariant 8B B=64 step (the class-warp shape $2),
#      then the sections of one 8B gate product at 256 rows, class-warp and tiled;
#   6. the class-warp kernel on by default (no switch): invariant against l1, llama-3.1-8b
#      at B 64 and 256, llama-3.2-1b at B 1, 64 and 256;
#   7. after each accumulator's two MMAs were moved NF apart: the sweep (SWEEP SAME), the
#      probe, invariant against l1 at 8B B 64 and 256 (no switch);
#   8. the invariant CUDA gate, every cell less the real model (typed inline twice: with
#      BATCHLAB_ROW_GEMM_CLASS_WARPS=1 at 563db46, and at the default at 109018b).
# Run as: bash tools/h200/s50-class-warps.sh N [shape] (after staging; bench-lib's environment)
set -u
R=$OUT/c$1 TAG=c$1
source tools/h200/bench-lib.sh
case "$1" in
1) SWEEP_MS=64,128,256 timeout 400 python3 tools/h200/row_gemm_sweep.py > $R/sweep.log 2>&1
   echo "== sweep: exit $?"; grep -E "SWEEP|DIFFERS|M=(64|128|256):|^  M=" $R/sweep.log | tail -40
   pack ;;
2) BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 timeout 400 python3 tools/h200/row_gemm_probe.py \
     > $R/probe.log 2>&1
   echo "== probe ($2): exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe.log | head -20
   pack ;;
3) bench inv-cw$2 BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 llama-3.1-8b 256 l1,invariant 2 240
   bench inv-base - llama-3.1-8b 256 l1,invariant 2 240 ;;
4) bench 1b-cw BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 llama-3.2-1b 64,256 l1,invariant 2 200
   bench 1b-base - llama-3.2-1b 64,256 l1,invariant 2 200 ;;
5) ncu_step 8b64-inv BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 llama-3.1-8b 64 invariant 64 200
   NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
   timeout 200 $NCU --kernel-name regex:batchlab_row_gemm --launch-skip 2 --launch-count 2 \
     --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
     --section WarpStateStats --section Occupancy --section LaunchStats \
     python3 tools/h200/row_gemm_ncu.py > $R/ncu-gate-product.txt 2>&1
   echo "== ncu product: exit $?"; grep -E "row_gemm_|Duration|Throughput|Pipe|Stall|Registers|Achieved Occ|L2 Hit" \
     $R/ncu-gate-product.txt | head -60; pack ;;
6) bench 8b-default - llama-3.1-8b 64,256 l1,invariant 2 400
   bench 1b-default - llama-3.2-1b 1,64,256 l1,invariant 3 300 ;;
7) timeout 200 python3 tools/h200/row_gemm_sweep.py > $R/sweep.log 2>&1
   echo "== sweep: exit $?"; grep -E "SWEEP|DIFFERS" $R/sweep.log; grep -A13 "^one decode" $R/sweep.log
   timeout 200 python3 tools/h200/row_gemm_probe.py > $R/probe.log 2>&1
   echo "== probe: exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe.log | head; pack
   bench 8b-mma - llama-3.1-8b 64,256 l1,invariant 2 400 ;;
8) sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
   timeout 175 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live --jobs 16 \
     --report $R/gate > $R/gate.log 2>&1
   echo "== gate: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/gate.log
   rm -f $R/gate/heatmap.png; pack ;;
esac

# Issue 28 item 1, for the next round's first machine (prepared in the twenty-first, not
# yet run): the tiled kernel takes SS K steps a pipeline stage (one barrier a stage
# instead of one a step; the class order and every element's arithmetic unchanged), and
# two 128 x 128 candidates use it (CANDIDATE_TILED, ss = 2 and 4). At 8B 256 rows the
# 64 x 64 class-warp kernel moves ~940 MB through L2 for a 117 MB gate weight; a 128 x 128
# tile halves that, and the tiled kernel's two sets of accumulators fit it. Compiled
# offline only (tools/cuda/nvrtc_check.py: no spills, 214-216 registers).
#   1. the sweep (SWEEP SAME: every candidate against the tiled default's bits at 128 and
#      256 rows, the class-warp shapes among them, so a broken class order shows as
#      DIFFERS), then the probe with the tiled kernel (BATCHLAB_ROW_GEMM_CLASS_WARPS=0).
# Run as: bash tools/h200/s54-next.sh 1 (after staging; bench-lib's environment)
set -u
R=$OUT/n$1 TAG=n$1
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 200 python3 tools/h200/row_gemm_sweep.py > $R/sweep.log 2>&1
   echo "== sweep: exit $?"; grep -E "SWEEP|DIFFERS" $R/sweep.log; grep -A13 "^one decode" $R/sweep.log
   BATCHLAB_ROW_GEMM_CLASS_WARPS=0 timeout 200 python3 tools/h200/row_gemm_probe.py \
     > $R/probe-tiled.log 2>&1
   echo "== probe tiled: exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe-tiled.log | head
   pack ;;
esac

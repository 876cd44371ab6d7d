# Issue 28 item 1, for the next round's first machine (prepared in the twentieth, not yet
# run): the tiled kernel's loads now go through the class-warp kernel's (_ROW_LOADS: each
# thread's row addresses set outside the main loop), which cut the class-warp kernel's
# time at 256 rows by ~30% in the twentieth round's sweeps. Compiled offline only
# (tools/cuda/nvrtc_check.py: no spills); the class-warp kernel's machine code is the
# same computation as the one the gates ran (its SASS differs only in how one predicate
# is formed).
#   1. the sweep (SWEEP SAME: every candidate, the tiled ones with the new loads among
#      them, against the default's bits), then the probe with the tiled kernel
#      (BATCHLAB_ROW_GEMM_CLASS_WARPS=0: rows at 17 M against 300 rows, tiled == split);
#   2. if a tiled shape leads at 128 / 256 rows: invariant against l1 at 8B B=256 with
#      =0 (the tiled default) and at the default, interleaved.
# Run as: bash tools/h200/s51-next.sh 1|2 (after staging; bench-lib's environment)
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
2) bench inv-tiled BATCHLAB_ROW_GEMM_CLASS_WARPS=0 llama-3.1-8b 256 l1,invariant 2 240
   bench inv-default - llama-3.1-8b 256 l1,invariant 2 240 ;;
esac

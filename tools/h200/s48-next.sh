# Issue 28, for the nineteenth round's first machine (prepared in the eighteenth, not yet
# run). The eighteenth round's one-kernel step (BATCHLAB_FAST_PERSISTENT=1) after the
# changes that came after its last H200 run (reports/bench/cuda-sm90/issue28-persistent/):
#   1. right and repeatable again (the staging folded into row_chain's rms_factor;
#      row_step.blocks from the driver's SM count): row_step_probe.py fast, the gate's
#      fast B=1 cells with the kernel --live --repeat, and cuda-repeat.toml's 18 one-row
#      cells (growth, park-resume, prefix-join, a joiner left alone, sampling);
#   2. the barrier in groups against one word (row_step_diag.py, one process), then the
#      1B and qwen3-0.6b benches with the kernel, the best groups setting, and without;
#   3. item 1: s46-next.sh 2 (invariant against l1 at 8B B=256, U=1 beside U=4).
# Run as: bash tools/h200/s48-next.sh 1|2|3 (after staging; bench-lib's environment)
set -u
R=$OUT/m$1 TAG=m$1
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 240 python3 tools/h200/row_step_probe.py fast > $R/probe-fast.log 2>&1
   echo "== row_step_probe fast: exit $?"; tail -10 $R/probe-fast.log; pack
   BATCHLAB_FAST_PERSISTENT=1 timeout 280 python3 -m batchlab matrix run --matrix matrices/cuda.toml \
     --live --repeat --filter 'fast/*/B1/*' --jobs 8 --report $R/gate-b1 > $R/gate-b1.log 2>&1
   echo "== gate fast B=1 with the kernel: exit $?"
   grep -E "cells passed|FAIL|not repeatable" $R/gate-b1.log | head -12
   rm -f $R/gate-b1/heatmap.png; pack
   # cuda-repeat.toml's one-row cells (growth, park-resume, prefix-join, a joiner left
   # alone, sampling), written for the kernel in the eighteenth round
   BATCHLAB_FAST_PERSISTENT=1 timeout 280 python3 -m batchlab matrix run \
     --matrix matrices/cuda-repeat.toml --live --repeat --jobs 8 --report $R/repeat-b1 \
     --filter 'fast/*/B1/*/ctx-grow/*,fast/*/B2/*,fast/*/B1/*/*_t0.8*' > $R/repeat-b1.log 2>&1
   echo "== cuda-repeat one-row cells with the kernel: exit $?"
   grep -E "cells passed|FAIL|not repeatable" $R/repeat-b1.log | head -12
   rm -f $R/repeat-b1/heatmap.png; pack ;;
2) timeout 150 python3 tools/h200/row_step_diag.py > $R/diag.log 2>&1
   echo "== diag: exit $?"; cat $R/diag.log; pack
   for round in 1 2; do
     bench 1b-on$round BATCHLAB_FAST_PERSISTENT=1 llama-3.2-1b 1 fast 3 100
     bench 1b-g12-$round BATCHLAB_FAST_PERSISTENT=1,BATCHLAB_ROW_STEP_GROUPS=12 llama-3.2-1b 1 fast 3 100
     bench 1b-off$round BATCHLAB_FAST_PERSISTENT=0 llama-3.2-1b 1 fast 3 100
   done
   bench q06-on BATCHLAB_FAST_PERSISTENT=1 qwen3-0.6b 1 fast 3 100
   bench q06-off BATCHLAB_FAST_PERSISTENT=0 qwen3-0.6b 1 fast 3 100 ;;
3) bash tools/h200/s46-next.sh 2 ;;
esac

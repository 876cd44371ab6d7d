# Issue 28, eighteenth round: item 2, fast's one-row step as one persistent kernel for all
# the layers (BATCHLAB_FAST_PERSISTENT=1: engine/kernels/row_step.py,
# engine/paths/fast/persistent_decode.py).
#   1. row_step_probe.py fast (the kernel against fast without it, twice), then time;
#   4. llama-3.2-1b B=1 benches, the kernel on / off / on (generate_step in each);
#   2. qwen3-0.6b and llama-3.1-8b B=1 benches on / off; the CUDA gate's fast B=1 cells
#      with the kernel, --live --repeat;
#   5. after the barrier's mend: row_step_diag.py, 1B on / off, the gate's B=1 cells, qwen3-0.6b;
#   6. after the barrier's buffer moved to the device: the diag and the benches again;
#   3. s46-next.sh 2 (item 1: invariant against l1 at 8B B=256, U=1 beside U=4).
# Run as: bash tools/h200/s47-persistent.sh 1|2|3|4|5|6 (after staging; bench-lib's environment)
set -u
R=$OUT/p$1 TAG=p$1
source tools/h200/bench-lib.sh
case "$1" in
1) for part in fast time; do
     timeout 200 python3 tools/h200/row_step_probe.py $part > $R/probe-$part.log 2>&1
     echo "== row_step_probe $part: exit $?"; cat $R/probe-$part.log | tail -12; pack
   done ;;
4) bench 1b-on BATCHLAB_FAST_PERSISTENT=1 llama-3.2-1b 1 fast 3 150
   bench 1b-off BATCHLAB_FAST_PERSISTENT=0 llama-3.2-1b 1 fast 3 150
   bench 1b-on2 BATCHLAB_FAST_PERSISTENT=1 llama-3.2-1b 1 fast 3 150 ;;
2) bench q06-on BATCHLAB_FAST_PERSISTENT=1 qwen3-0.6b 1 fast 3 150
   bench q06-off BATCHLAB_FAST_PERSISTENT=0 qwen3-0.6b 1 fast 3 150
   bench 8b-on BATCHLAB_FAST_PERSISTENT=1 llama-3.1-8b 1 fast 2 150
   BATCHLAB_FAST_PERSISTENT=1 timeout 280 python3 -m batchlab matrix run --matrix matrices/cuda.toml \
     --live --repeat --filter 'fast/*/B1/*' --jobs 8 --report $R/gate-b1 > $R/gate-b1.log 2>&1
   echo "== gate fast B=1 with the kernel: exit $?"
   grep -E "cells passed|FAIL|not repeatable" $R/gate-b1.log | head -12
   rm -f $R/gate-b1/heatmap.png; pack ;;
3) bash tools/h200/s46-next.sh 2 ;;
5) timeout 150 python3 tools/h200/row_step_diag.py > $R/diag.log 2>&1
   echo "== diag: exit $?"; cat $R/diag.log; pack
   bench 1b-on BATCHLAB_FAST_PERSISTENT=1 llama-3.2-1b 1 fast 3 120
   bench 1b-off BATCHLAB_FAST_PERSISTENT=0 llama-3.2-1b 1 fast 3 120
   BATCHLAB_FAST_PERSISTENT=1 timeout 200 python3 -m batchlab matrix run --matrix matrices/cuda.toml \
     --live --repeat --filter 'fast/*/B1/*' --jobs 8 --report $R/gate-b1 > $R/gate-b1.log 2>&1
   echo "== gate fast B=1 with the kernel: exit $?"
   grep -E "cells passed|FAIL|not repeatable" $R/gate-b1.log | head -12
   rm -f $R/gate-b1/heatmap.png; pack
   bench q06-on BATCHLAB_FAST_PERSISTENT=1 qwen3-0.6b 1 fast 2 100 ;;
6) timeout 100 python3 tools/h200/row_step_diag.py > $R/diag.log 2>&1
   echo "== diag: exit $?"; cat $R/diag.log; pack
   bench 1b-on BATCHLAB_FAST_PERSISTENT=1 llama-3.2-1b 1 fast 3 100
   bench 1b-off BATCHLAB_FAST_PERSISTENT=0 llama-3.2-1b 1 fast 3 100
   bench q06-on BATCHLAB_FAST_PERSISTENT=1 qwen3-0.6b 1 fast 3 100
   bench q06-off BATCHLAB_FAST_PERSISTENT=0 qwen3-0.6b 1 fast 3 100 ;;
esac

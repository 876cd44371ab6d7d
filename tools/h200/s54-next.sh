# Issue 28, twenty-second round (reports/bench/cuda-sm90/issue28-wide/).
#   1. the sweep (SWEEP SAME: every candidate against the tiled default's bits at 128 and
#      256 rows, the class-warp shapes among them), then the probe with the tiled kernel
#      (BATCHLAB_ROW_GEMM_CLASS_WARPS=0): the SS tiled shapes prepared last round. Ran
#      at bdd22bb.
#   2. item 2: fast's one-kernel step with its products through stream_pairs
#      (BATCHLAB_ROW_STEP_STREAM): the streaming rate of each product alone
#      (stream_probe.py), the same bytes as two_dots (row_step_probe.py stream), then
#      fast / generate_step at 1B B=1 with it and without, interleaved.
#   3. item 1: the 64 x 128 class-warp tiles from 129 rows (the new default): the
#      invariant CUDA gate, then 8B B=256 invariant / l1 at the default and with the old
#      default (BATCHLAB_ROW_GEMM_CLASS_WARPS=1).
#   4. the fast B=1 gate with STREAM=$2 (cuda.toml, --live --repeat), then the table's
#      1B row with it.
#   5. the gpt-oss cell part 3's gate failed on its second judge, twice more; 8B B=256 at
#      the default and with CLASS_WARPS=1 again; the table's 1B row (every path, l1 and
#      invariant and fast; generate_step and BatchGenerator come with every bench).
#   6. (for the next round) the streamed products with the L2 prefetch kept (`ahead`):
#      STREAM SAME, then fast at 1B B=1 with STREAM=4 against 0, interleaved, twice each.
# Run as: bash tools/h200/s54-next.sh N [stream] (after staging; bench-lib's environment)
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
2) timeout 100 python3 tools/h200/stream_probe.py > $R/stream.log 2>&1
   echo "== stream probe: exit $?"; cat $R/stream.log; pack
   timeout 240 python3 tools/h200/row_step_probe.py stream > $R/probe-stream.log 2>&1
   echo "== row_step_probe stream: exit $?"; cat $R/probe-stream.log; pack
   for i in 1 2; do
     bench 1b-s0-$i BATCHLAB_ROW_STEP_STREAM=0 llama-3.2-1b 1 fast,generate_step 3 100
     bench 1b-s4-$i BATCHLAB_ROW_STEP_STREAM=4 llama-3.2-1b 1 fast,generate_step 3 100
   done ;;
3) sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
   timeout 280 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live --jobs 16 \
     --report $R/gate-inv > $R/gate-inv.log 2>&1
   echo "== invariant CUDA gate: exit $?"; grep -E "cells passed|FAIL" $R/gate-inv.log | head
   echo "solo lines: $(grep -rl 'every row bit-identical to its solo run' $R/gate-inv | wc -l)"
   rm -f $R/gate-inv/heatmap.png; pack
   bench 8b-wide - llama-3.1-8b 256 l1,invariant 3 150
   bench 8b-cw1 BATCHLAB_ROW_GEMM_CLASS_WARPS=1 llama-3.1-8b 256 l1,invariant 3 150 ;;
4) gate_live gate-b1-s$2 BATCHLAB_ROW_STEP_STREAM=$2 matrices/cuda.toml 'fast/*/B1/*'
   bench 1b-table BATCHLAB_ROW_STEP_STREAM=$2 llama-3.2-1b 1,64,256 \
     fast,l1,invariant,BatchGenerator,generate_step 2 280 ;;
5) sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
   for i in 1 2; do
     timeout 60 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live \
       --filter 'invariant/gpt-oss/B65/needle/evict-many/ctx-wrap/seed1_cb48_ps16' \
       --report $R/gpt-oss-$i > $R/gpt-oss-$i.log 2>&1
     echo "== gpt-oss cell $i: exit $?"; grep -E "cells passed|KL over" $R/gpt-oss-$i.log
   done; pack
   bench 8b-wide2 - llama-3.1-8b 256 l1,invariant 3 120
   bench 8b-cw1-2 BATCHLAB_ROW_GEMM_CLASS_WARPS=1 llama-3.1-8b 256 l1,invariant 3 120
   bench 1b-table - llama-3.2-1b 1,64,256 l1,fast,invariant 2 230 ;;
6) timeout 200 python3 tools/h200/row_step_probe.py stream > $R/probe-stream.log 2>&1
   echo "== row_step_probe stream: exit $?"; cat $R/probe-stream.log; pack
   for i in 1 2; do
     bench 1b-s0-$i BATCHLAB_ROW_STEP_STREAM=0 llama-3.2-1b 1 fast 3 100
     bench 1b-s4-$i BATCHLAB_ROW_STEP_STREAM=4 llama-3.2-1b 1 fast 3 100
   done ;;
esac

# Issue 28, the nineteenth round's machine: the one-kernel step (kernels/row_step.py) on by
# default, with each warp's L2 prefetch of its next weights (PREFETCH) and a release /
# acquire grid barrier to choose from (BATCHLAB_ROW_STEP_BARRIER=1).
#   1. where the kernel's time goes (row_step_diag.py: prefetch on / off, the barriers,
#      each phase's share), then right and repeatable at the defaults (row_step_probe.py);
#   2. the same probe with the release / acquire barrier; the gate's fast B=1 cells and
#      cuda-repeat.toml's 18 one-row cells at the defaults, --live --repeat, no switch
#      set; the B=1 cells again with the release / acquire barrier;
#   3. the benches: llama-3.2-1b and qwen3-0.6b at B=1, the defaults, prefetch off, the
#      other barrier, the kernel off;
#   4. llama-3.1-8b at B=1, the kernel on and off (it is on by default there too);
#   5. item 1: s46-next.sh 2 (invariant against l1 at 8B B=256, U=1 beside U=4);
#   6. after 1-4 (the kernel on by default only up to DEFAULT_MAX_LAYER_BYTES; the fast GPU
#      gate's one free top-1 miss): cuda-repeat's one-row cells and the gate's fast B=1
#      cells again, no switch set, then the benches at the defaults (8B: the kernel off).
#   7. two blocks an SM against one (row_step.BLOCKS_PER_SM; the merge's loads now
#      __ldcg): row_step_diag.py blocks, the benches at 132 and 264 blocks;
#   8. the gates of 6 at 264 blocks and at the default; the probe at 264.
#   9. Nsight Compute over one launch of the kernel (llama-3.2-1b): throughput, occupancy,
#      the warps' stalls, for the next round.
#  10. a warp's first round of each phase read before the barrier (PRE): the probe with
#      it, then the 1B bench with it and without. Ran at 5cc3f00; no gain (1.37 against
#      1.34 ms), so PRE was taken out again (its switch is gone: part 10 is the record).
# Run as: bash tools/h200/s49-next.sh 1-10 (after staging; bench-lib's environment)
set -u
R=$OUT/r$1 TAG=r$1
source tools/h200/bench-lib.sh
gate() { gate_live "$@"; }  # bench-lib.sh's, the same commands as ran
case "$1" in
1) timeout 200 python3 tools/h200/row_step_diag.py > $R/diag.log 2>&1
   echo "== diag: exit $?"; cat $R/diag.log; pack
   timeout 240 python3 tools/h200/row_step_probe.py fast > $R/probe-fast.log 2>&1
   echo "== row_step_probe fast: exit $?"; tail -12 $R/probe-fast.log; pack ;;
2) BATCHLAB_ROW_STEP_BARRIER=1 timeout 240 python3 tools/h200/row_step_probe.py fast \
     > $R/probe-fast-bar1.log 2>&1
   echo "== row_step_probe fast, release / acquire barrier: exit $?"
   tail -12 $R/probe-fast-bar1.log; pack
   gate gate-b1 - matrices/cuda.toml 'fast/*/B1/*'
   gate repeat-b1 - matrices/cuda-repeat.toml \
     'fast/*/B1/*/ctx-grow/*,fast/*/B2/*,fast/*/B1/*/*_t0.8*'
   gate gate-b1-bar1 BATCHLAB_ROW_STEP_BARRIER=1 matrices/cuda.toml 'fast/*/B1/*' ;;
3) bench 1b-on - llama-3.2-1b 1 fast 3 100
   bench 1b-pf0 BATCHLAB_ROW_STEP_PREFETCH=0 llama-3.2-1b 1 fast 3 100
   bench 1b-bar1 BATCHLAB_ROW_STEP_BARRIER=1 llama-3.2-1b 1 fast 3 100
   bench 1b-off BATCHLAB_FAST_PERSISTENT=0 llama-3.2-1b 1 fast 3 100
   bench q06-on - qwen3-0.6b 1 fast 3 100
   bench q06-off BATCHLAB_FAST_PERSISTENT=0 qwen3-0.6b 1 fast 3 100 ;;
4) bench 8b-on - llama-3.1-8b 1 fast 2 200
   bench 8b-off BATCHLAB_FAST_PERSISTENT=0 llama-3.1-8b 1 fast 2 200 ;;
5) bash tools/h200/s46-next.sh 2 ;;
6) gate repeat-b1 - matrices/cuda-repeat.toml \
     'fast/*/B1/*/ctx-grow/*,fast/*/B2/*,fast/*/B1/*/*_t0.8*'
   gate gate-b1 - matrices/cuda.toml 'fast/*/B1/*'
   bench 1b - llama-3.2-1b 1 fast 3 100
   bench q06 - qwen3-0.6b 1 fast 3 100
   bench 8b - llama-3.1-8b 1 fast 2 200 ;;
7) timeout 150 python3 tools/h200/row_step_diag.py blocks > $R/diag.log 2>&1
   echo "== diag blocks: exit $?"; cat $R/diag.log; pack
   for round in 1 2; do
     bench 1b-132-$round - llama-3.2-1b 1 fast 3 100
     bench 1b-264-$round BATCHLAB_ROW_STEP_BLOCKS=264 llama-3.2-1b 1 fast 3 100
   done
   bench q06-132 - qwen3-0.6b 1 fast 3 100
   bench q06-264 BATCHLAB_ROW_STEP_BLOCKS=264 qwen3-0.6b 1 fast 3 100 ;;
8) BATCHLAB_ROW_STEP_BLOCKS=264 timeout 200 python3 tools/h200/row_step_probe.py fast \
     > $R/probe-264.log 2>&1
   echo "== row_step_probe fast, 264 blocks: exit $?"; tail -3 $R/probe-264.log; pack
   for blocks in 264 0; do
     gate repeat-b1-$blocks BATCHLAB_ROW_STEP_BLOCKS=$blocks matrices/cuda-repeat.toml \
       'fast/*/B1/*/ctx-grow/*,fast/*/B2/*,fast/*/B1/*/*_t0.8*'
     gate gate-b1-$blocks BATCHLAB_ROW_STEP_BLOCKS=$blocks matrices/cuda.toml 'fast/*/B1/*'
   done ;;
9) NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
   timeout 300 $NCU --kernel-name regex:row_step --launch-skip 4 --launch-count 1 \
     --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
     --section WarpStateStats --section SchedulerStats --section Occupancy \
     --section LaunchStats python3 tools/h200/row_step_ncu.py > $R/ncu.txt 2> $R/ncu.err
   echo "== ncu: exit $?"; tail -3 $R/ncu.err; cat $R/ncu.txt | grep -v "^==PROF==" | tail -150; pack ;;
10) BATCHLAB_ROW_STEP_PRELOAD=1 timeout 120 python3 tools/h200/row_step_probe.py fast \
     > $R/probe-pre1.log 2>&1
   echo "== row_step_probe fast, PRE=1: exit $?"; tail -9 $R/probe-pre1.log; pack
   bench 1b-pre1 BATCHLAB_ROW_STEP_PRELOAD=1 llama-3.2-1b 1 fast 3 100
   bench 1b-pre0 - llama-3.2-1b 1 fast 3 100 ;;
esac

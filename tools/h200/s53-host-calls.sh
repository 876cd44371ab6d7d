# Issue 28 item 1, the twenty-first round: the invariant path's B = 1 step is the host's,
# ~113 row-GEMM calls of mx.fast.cuda_kernel a step on llama-3.2-1b. This round's code:
# q/k/v and gate/up share one call up to 16 rows (rowblock.GROUPED_UP_TO), x goes into
# the kernel as (..., K) with no reshape either side, and MLX is given the kernel's text
# without comments or indentation (row_gemm.compact: MLX rebuilds and hashes it per call).
# The A/B runs the twentieth round's code (775c539, unpacked under ab-old/ by the caller:
# git archive 775c539 batchlab | tar -x -C ab-old) in the same session.
#   1. the sweep (SWEEP SAME; the tiled kernel's new loads among the candidates), the probe
#      at the default and with the tiled kernel (BATCHLAB_ROW_GEMM_CLASS_WARPS=0);
#   2. llama-3.2-1b B=1: l1, invariant and fast, this code and 775c539's, interleaved
#      sessions; then bench profile (forward build, submit, device wait) of both;
#   3. the table, llama-3.1-8b: B 1, 64 and 256, l1, fast and invariant (with
#      BatchGenerator and generate_step, which every bench run times);
#   4. the invariant CUDA gate, every cell less the real model;
#   5. the table, llama-3.2-1b: B 1, 64 and 256; then bench profile of fast and l1 at B=1.
# Parts 3-5 ran on the code after part 2's verdict: grouping back to opt-in (no gain at
# B = 1), the unreshaped input and the compacted text kept.
#   6. the split kernel's 8 steps in flight at 1-16 rows (part 1's sweep put them first on
#      both models) against 4 (6cc6fae under ab-old/: git archive 6cc6fae batchlab | tar
#      -x -C ab-old), invariant and l1 at B=1, llama-3.2-1b then llama-3.1-8b, each pair
#      in one session; then the probe at the new defaults.
# Run as: bash tools/h200/s53-host-calls.sh N (after staging; bench-lib's environment)
set -u
R=$OUT/h$1 TAG=h$1
source tools/h200/bench-lib.sh
OLD="PYTHONPATH=/tmp/site:$PWD/ab-old"
case "$1" in
1) timeout 200 python3 tools/h200/row_gemm_sweep.py > $R/sweep.log 2>&1
   echo "== sweep: exit $?"; grep -E "SWEEP|DIFFERS" $R/sweep.log; grep -A13 "^one decode" $R/sweep.log
   timeout 200 python3 tools/h200/row_gemm_probe.py > $R/probe.log 2>&1
   echo "== probe: exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe.log | head
   BATCHLAB_ROW_GEMM_CLASS_WARPS=0 timeout 200 python3 tools/h200/row_gemm_probe.py \
     > $R/probe-tiled.log 2>&1
   echo "== probe tiled: exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe-tiled.log | head
   pack ;;
2) bench 1b1-new - llama-3.2-1b 1 l1,invariant,fast 3 200
   bench 1b1-old "$OLD" llama-3.2-1b 1 l1,invariant,fast 3 200
   for v in new old; do
     [ $v = old ] && e="$OLD" || e=X=1
     env $e timeout 150 python3 -m batchlab bench profile --model llama-3.2-1b --batch 1 \
       --paths l1,invariant --out $R/profile-$v > $R/profile-$v.log 2>&1
     echo "== profile $v: exit $?"; cat $R/profile-$v/profile/*.md 2>/dev/null | head -30
   done; pack ;;
3) bench 8b - llama-3.1-8b 1,64,256 l1,fast,invariant 2 560 ;;
4) sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
   timeout 200 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live --jobs 16 \
     --report $R/gate > $R/gate.log 2>&1
   echo "== gate: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/gate.log
   rm -f $R/gate/heatmap.png; pack ;;
5) bench 1b - llama-3.2-1b 1,64,256 l1,fast,invariant 3 400
   timeout 150 python3 -m batchlab bench profile --model llama-3.2-1b --batch 1 \
     --paths l1,fast --out $R/profile > $R/profile.log 2>&1
   echo "== profile: exit $?"; grep "^| 1 " $R/profile/profile/*.md; pack ;;
6) bench 1b1-u8 - llama-3.2-1b 1 l1,invariant 3 200
   bench 1b1-u4 "$OLD" llama-3.2-1b 1 l1,invariant 3 200
   bench 8b1-u8 - llama-3.1-8b 1 l1,invariant 2 200
   bench 8b1-u4 "$OLD" llama-3.1-8b 1 l1,invariant 2 200
   timeout 100 python3 tools/h200/row_gemm_probe.py > $R/probe.log 2>&1
   echo "== probe: exit $?"; grep -E "ROW GEMM|False|TOO FAR|differ" $R/probe.log | head
   pack ;;
esac

# Issue 28, twenty-fourth round (prepared in the twenty-third; reports/bench/cuda-sm90/
# issue28-stream/ holds the twenty-third's).
#   1. STREAM SAME with 16 warps a block and the merge slice by slice among the switches
#      (row_step_probe.py stream),
#      then fast's values-ahead loop broken on purpose in a copy (8 keys summed in
#      descending order): STREAM SAME must say no.
#   2. item 2, the paired A/B in one process: the defaults against 12 and 16 warps a
#      block (the products' units over more warps: q / k / v in one round at 1B) and
#      slices of 32 keys (twice the attention's warps; another float order, so the gate
#      in 3 judges it), and the merge slice by slice, on llama-3.2-1b and qwen3-0.6b.
#   3. fast's B = 1 gate with the switches in $2 (k=v,k=v), then fast at 1B B=1 with them
#      and without, interleaved (s55-next.sh part 4).
#   4. the table: llama-3.2-1b B 1, 64, 256 (l1, fast, invariant), llama-3.1-8b B=256
#      (l1, fast, invariant: items 1 and 3).
#   5. Nsight Compute over one fast step at 1B B=1 (every kernel timed alone): where the
#      step's time goes with the values ahead.
#   6. item 1's remaining 10-13%: Nsight Compute over one llama-3.1-8b B=256 step of the
#      invariant path and one of l1, kernel by kernel (the row GEMM against MLX's GEMMs,
#      the row attention against MLX's SDPA).
#   7. item 1: the class-warp kernel's two new shapes (CANDIDATE_CLASS_WARPS 9 and 10:
#      64 x 128 and 128 x 64 on 16 warps, 122 / 126 registers offline) in the sweep at
#      128 and 256 rows on 8B's shapes (SWEEP SAME must say yes);
#   8. then, if one beats the default in the sweep's step sums, 8B B=256 l1 / invariant
#      with it ($2: 9 or 10) and with the default (64 x 128 on 8 warps), interleaved.
# Device time: ~1800 s a session does not hold all eight (7 alone ~300 s, 8 ~450 s).
# In order of what they settle: 1 (the break on purpose), 7 then 8 (item 1), 2 then 3
# (item 2), 4 (the table), 6, 5.
# Run as: bash tools/h200/s56-next.sh N [env] (after staging; bench-lib's environment)
set -u
R=$OUT/n$1 TAG=n$1
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 400 python3 tools/h200/row_step_probe.py stream > $R/probe-stream.log 2>&1
   echo "== row_step_probe stream: exit $?"; cat $R/probe-stream.log; pack
   mkdir -p /tmp/broken && tar cf - --exclude=.gpu-stage . | tar xf - -C /tmp/broken
   (cd /tmp/broken && python3 - <<'PY'
p = "batchlab/engine/kernels/row_step.py"
s = open(p).read()
loop = "for (int k = 0; k < VA; ++k) {"
at = s.index(loop, s.index(loop) + 1)  # the arithmetic's loop: the keys summed descending
open(p, "w").write(s[:at] + "for (int k = VA - 1; k >= 0; --k) {" + s[at + len(loop):])
PY
   grep -c "k = VA - 1" batchlab/engine/kernels/row_step.py
   PYTHONPATH=/tmp/site:/tmp/broken timeout 150 python3 tools/h200/row_step_probe.py stream \
     llama-3.2-1b@L3 qwen3-0.6b@L3 > $R/probe-broken.log 2>&1
   echo "== row_step_probe stream, broken: exit $?"; cat $R/probe-broken.log); pack ;;
2) for model in llama-3.2-1b qwen3-0.6b; do
     timeout 250 python3 tools/h200/row_step_ab.py --model $model --rounds 5 default \
       w12:warps=12 w16:warps=16 ks32:keys=32 w16-ks32:warps=16/keys=32 mg:merge=1 \
       > $R/ab-$model.log 2>&1
     echo "== ab $model: exit $?"; grep -v "^round" $R/ab-$model.log | tail -6; pack
   done ;;
3) gate_live gate-b1-env $2 matrices/cuda.toml 'fast/*/B1/*'
   for i in 1 2; do
     bench 1b-def-$i - llama-3.2-1b 1 fast 3 100
     bench 1b-env-$i $2 llama-3.2-1b 1 fast 3 100
   done ;;
4) bench 1b-table - llama-3.2-1b 1,64,256 l1,fast,invariant 2 280
   bench 8b-256 - llama-3.1-8b 256 l1,fast,invariant 3 200 ;;
5) ncu_step 1b-fast - llama-3.2-1b 1 fast 3 120 ;;
6) ncu_step 8b-inv - llama-3.1-8b 256 invariant 2 280
   ncu_step 8b-l1 - llama-3.1-8b 256 l1 2 280 ;;
7) SWEEP_MS=128,256 SWEEP_SHAPES=4096x4096,4096x1024,4096x14336,14336x4096 timeout 300 \
     python3 tools/h200/row_gemm_sweep.py > $R/sweep.log 2>&1
   echo "== sweep: exit $?"; grep -E "SAME|best #|  M=256:" $R/sweep.log | head -30; pack ;;
8) bench 8b-def-1 - llama-3.1-8b 256 l1,invariant 2 150
   bench 8b-cw$2 BATCHLAB_ROW_GEMM_CLASS_WARPS=$2 llama-3.1-8b 256 l1,invariant 2 150
   bench 8b-def-2 - llama-3.1-8b 256 l1,invariant 2 150 ;;
esac

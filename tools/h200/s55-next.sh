# Issue 28, twenty-third round (reports/bench/cuda-sm90/issue28-stream/).
#   1. fast's B = 1 gate at the defaults (cuda.toml, --live --repeat: the one-kernel
#      step's default loops as refactored into products() last round), then STREAM SAME
#      (row_step_probe.py stream: the streamed products with the L2 prefetch kept, 8 keys'
#      values loaded ahead, both, against the defaults' bytes).
#   2. item 2, the paired A/B in one process (row_step_ab.py): the defaults against the
#      products streamed in every phase, in some phases only, and the values loaded ahead,
#      on llama-3.2-1b then qwen3-0.6b.
#   3. the table: llama-3.2-1b B 1, 64, 256 (l1, fast, invariant; generate_step and
#      BatchGenerator come with each bench), then llama-3.1-8b B=256 l1 and invariant.
#   4. fast's B = 1 gate with the switches in $2 (k=v,k=v), then a bench of fast at 1B B=1
#      with them and without, interleaved.
#   5. after 8 keys' values ahead became the default: STREAM SAME with the trimmed phases
#      (BATCHLAB_ROW_STEP_TRIM) among the switches, their paired A/B, fast's B = 1
#      gate with the trim.
#   6. (not run: no device time was left to start a machine) the break on purpose, moved
#      to s56-next.sh part 1.
# Parts 1, 2, 4 ran at 059ccde, 3 at 059ccde with VALUES_AHEAD = 8, 5 at 89c96cc. The
# switches parts 2 and 5 name by phases= and trim= (BATCHLAB_ROW_STEP_STREAM_PHASES,
# BATCHLAB_ROW_STEP_TRIM) were taken out after them: neither gained.
# Run as: bash tools/h200/s55-next.sh N [env] (after staging; bench-lib's environment)
set -u
R=$OUT/n$1 TAG=n$1
source tools/h200/bench-lib.sh
case "$1" in
1) gate_live gate-b1 - matrices/cuda.toml 'fast/*/B1/*'
   timeout 380 python3 tools/h200/row_step_probe.py stream > $R/probe-stream.log 2>&1
   echo "== row_step_probe stream: exit $?"; cat $R/probe-stream.log; pack ;;
2) for model in llama-3.2-1b qwen3-0.6b; do
     timeout 280 python3 tools/h200/row_step_ab.py --model $model --rounds 5 default \
       s4:stream=4 s2:stream=2 s4-down:stream=4/phases=8 s4-no-o:stream=4/phases=13 \
       s4-gu-down:stream=4/phases=12 va8:ahead=8 s4-va8:stream=4/ahead=8 \
       > $R/ab-$model.log 2>&1
     echo "== ab $model: exit $?"; grep -v "^round" $R/ab-$model.log | tail -12; pack
   done ;;
3) bench 1b-table - llama-3.2-1b 1,64,256 l1,fast,invariant 2 280
   bench 8b-256 - llama-3.1-8b 256 l1,invariant 3 150 ;;
4) gate_live gate-b1-env $2 matrices/cuda.toml 'fast/*/B1/*'
   for i in 1 2; do
     bench 1b-def-$i - llama-3.2-1b 1 fast 3 100
     bench 1b-env-$i $2 llama-3.2-1b 1 fast 3 100
   done ;;
5) timeout 300 python3 tools/h200/row_step_probe.py stream > $R/probe-stream.log 2>&1
   echo "== row_step_probe stream: exit $?"; cat $R/probe-stream.log; pack
   for model in llama-3.2-1b qwen3-0.6b; do
     timeout 150 python3 tools/h200/row_step_ab.py --model $model --rounds 5 default \
       trim:trim=1 va0:ahead=0 s4-trim:stream=4/trim=1 > $R/ab-$model.log 2>&1
     echo "== ab $model: exit $?"; grep -v "^round" $R/ab-$model.log | tail -4; pack
   done
   gate_live gate-b1-trim BATCHLAB_ROW_STEP_TRIM=1 matrices/cuda.toml 'fast/*/B1/*' ;;
esac

# Issue 28, sixteenth round: fast's tiled decode kernel (grouped_decode_tiled.py, its own
# rounding, opt-in BATCHLAB_GQA_TILED=1) on the H200.
#   1. tiled_probe.py accuracy (against float32 attention, beside MLX's own error; five
#      calls the same bytes) and time (us a call against the looped kernel and MLX);
#   2. the decode step: tiled against the looped default in one process (looped_step_ab),
#      8B and 1B at B=256, then batchlab bench 8B B=256 with the kernel;
#   3. the CUDA gate with the kernel: cuda-repeat.toml's and cuda.toml's fast cells,
#      --live --repeat, judged by FAST_KL_GATE_GPU_16BIT; tiled_probe.py fast;
#   4. cuda.toml's fast cells without it (the fifteenth round's GPU gate, live).
# Run as: bash tools/h200/s43-tiled.sh 1|2|3|4 (after staging; bench-lib's environment)
set -u
R=$OUT/t$1 TAG=t$1
source tools/h200/bench-lib.sh
gate() {  # tag, matrix, filter, env (k=v or -), timeout
  env_args=$(echo $4 | tr ',' ' '); [ "$4" = - ] && env_args=
  env $env_args timeout $5 python3 -m batchlab matrix run --matrix $2 --live --repeat \
    --filter "$3" --jobs 8 --report $R/$1 > $R/$1.log 2>&1
  echo "== gate $1: exit $?"; grep -E "cells passed|not repeatable|wall time" $R/$1.log | head -8
  grep -E "FAIL" $R/$1.log | head -6; rm -f $R/$1/heatmap.png; pack
}
case "$1" in
1) timeout 240 python3 tools/h200/tiled_probe.py accuracy > $R/accuracy.log 2>&1
   echo "== accuracy: exit $?"; cat $R/accuracy.log | cut -c1-400
   timeout 150 python3 tools/h200/tiled_probe.py time > $R/time.log 2>&1
   echo "== time: exit $?"; cat $R/time.log; pack ;;
2) for m in llama-3.1-8b llama-3.2-1b; do
     timeout 200 python3 tools/h200/looped_step_ab.py --model $m --batch 256 --rounds 3 \
       --variants default,tiled > $R/ab-$m.log 2>&1
     echo "== ab $m: exit $?"; tail -6 $R/ab-$m.log; pack
   done
   bench 8b-tiled BATCHLAB_GQA_TILED=1 llama-3.1-8b 256 fast,l1 3 150 ;;
3) gate repeat-tiled matrices/cuda-repeat.toml 'fast/*' BATCHLAB_GQA_TILED=1 200
   gate cuda-fast-tiled matrices/cuda.toml 'fast/*' BATCHLAB_GQA_TILED=1 280
   timeout 200 python3 tools/h200/tiled_probe.py fast > $R/fast.log 2>&1
   echo "== fast: exit $?"; cat $R/fast.log; pack ;;
4) gate cuda-fast matrices/cuda.toml 'fast/*' - 280 ;;
5) # broken on purpose: the tiled kernel drops each row's newest key (an off-by-one)
   B=/tmp/broken; rm -rf $B; mkdir -p $B; cp -r batchlab matrices $B/
   sed -i 's|const bool ok = r < end;|const bool ok = r < end \&\& r != keys - 1;|' \
     $B/batchlab/engine/kernels/grouped_decode_tiled.py
   sed -i 's|batchlab_grouped_decode_tiled_|batchlab_broken_tiled_|' $B/batchlab/engine/kernels/grouped_decode_tiled.py
   grep -c "r != keys - 1" $B/batchlab/engine/kernels/grouped_decode_tiled.py
   (cd $B && PYTHONPATH=/tmp/site:$B BATCHLAB_GQA_TILED=1 timeout 200 python3 -m batchlab \
     matrix run --matrix matrices/cuda.toml --live --repeat --filter 'fast/*' --jobs 8 \
     --report $R/broken > $R/broken.log 2>&1)
   echo "== broken: exit $?"; grep -E "cells passed|wall time" $R/broken.log
   grep -E "FAIL" $R/broken.log | head -4; rm -f $R/broken/heatmap.png; pack ;;
esac

# Issue 28, seventeenth round: item 2, fast's one-row step as four kernels a layer
# (BATCHLAB_FAST_CHAIN=1: engine/kernels/row_chain.py, engine/paths/fast/chain_decode.py).
#   1. chain_probe.py kernels / time / fast: each kernel against float32 and against MLX's
#      ops, their time, and fast at B=1 with the chain against fast without it; then
#      llama-3.2-1b B=1 benches, the chain on / off interleaved (generate_step in each);
#   2. what a cuda_kernel call costs the host (kernel_call_cost.py), bench profile of the
#      1B step with the chain on and off, qwen3-0.6b B=1 benches on and off;
#   3. s44-next.sh's first and fourth parts (the new small-B tiled cells; item 1's GQA
#      row kernel with keys loaded ahead, and invariant against l1 at 8B B=256).
#   4. the CUDA gate's fast cells at B=1 with the chain, --live --repeat; llama-3.1-8b B=1
#      with the chain; Nsight over one 1B B=1 step with the chain.
#   5. after the first four (normalised input staged in shared memory, launch arguments made
#      once, weights looked up once): the kernels' accuracy again, Nsight over every slice
#      count, the 1B B=1 benches and the profile again.
#   6. after part 5 (RoPE's cos / sin made once a step as MLX ops, read by norm_qkv): the
#      kernels' accuracy, Nsight over the slices (and norm_qkv without RoPE), 1B benches;
#   7. part 3 cut to the device time left: the small-B tiled cells, the row-GQA probe, and
#      invariant against l1 at 8B B=256 with four keys ahead.
# Run as: bash tools/h200/s45-chain.sh 1|2|3|4|5|6|7 (after staging; bench-lib's environment)
set -u
R=$OUT/c$1 TAG=c$1
source tools/h200/bench-lib.sh
# the kernels' accuracy, Nsight over every slice count, the 1B B=1 benches on and off
# (parts 5 and 6: part 5 printed the whole probe log, 6 its verdicts)
kernels_slices_benches() {  # Nsight's timeout
  timeout 150 python3 tools/h200/chain_probe.py kernels > $R/probe-kernels.log 2>&1
  echo "== chain_probe kernels: exit $?"; tail -3 $R/probe-kernels.log; pack
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  timeout $1 $NCU --kernel-name regex:batchlab_row_chain --clock-control none \
    --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    python3 tools/h200/chain_probe.py slices > $R/ncu-slices.csv 2> $R/ncu-slices.err
  echo "== ncu slices: exit $?"; tail -2 $R/ncu-slices.err
  python3 tools/h200/ncu_summary.py $R/ncu-slices.csv "row chain slices, 5 calls each" 40 \
    | tee $R/ncu-slices.txt; pack
  bench 1b-chain BATCHLAB_FAST_CHAIN=1 llama-3.2-1b 1 fast 3 150
  bench 1b-plain BATCHLAB_FAST_CHAIN=0 llama-3.2-1b 1 fast 3 150
}
case "$1" in
1) for part in kernels time fast; do
     timeout 240 python3 tools/h200/chain_probe.py $part > $R/probe-$part.log 2>&1
     echo "== chain_probe $part: exit $?"; cat $R/probe-$part.log; pack
   done
   bench 1b-chain BATCHLAB_FAST_CHAIN=1 llama-3.2-1b 1 fast 3 150
   bench 1b-plain BATCHLAB_FAST_CHAIN=0 llama-3.2-1b 1 fast 3 150
   bench 1b-chain2 BATCHLAB_FAST_CHAIN=1 llama-3.2-1b 1 fast 3 150 ;;
2) timeout 120 python3 tools/h200/kernel_call_cost.py > $R/call-cost.log 2>&1
   echo "== kernel_call_cost: exit $?"; cat $R/call-cost.log
   for f in 1 0; do
     BATCHLAB_FAST_CHAIN=$f timeout 120 python3 -m batchlab bench profile --model llama-3.2-1b \
       --batch 1 --prompt-len 128 --gen-len 128 --paths fast --repeats 3 --out $R/prof-$f \
       > $R/prof-$f.log 2>&1
     echo "== profile chain=$f: exit $?"; grep -E "^\| 1 \|" $R/prof-$f.log
   done; pack
   bench q06-chain BATCHLAB_FAST_CHAIN=1 qwen3-0.6b 1 fast 3 150
   bench q06-plain BATCHLAB_FAST_CHAIN=0 qwen3-0.6b 1 fast 3 150 ;;
4) BATCHLAB_FAST_CHAIN=1 timeout 280 python3 -m batchlab matrix run --matrix matrices/cuda.toml \
     --live --repeat --filter 'fast/*/B1/*' --jobs 8 --report $R/gate-b1 > $R/gate-b1.log 2>&1
   echo "== gate fast B=1 with the chain: exit $?"
   grep -E "cells passed|FAIL|not repeatable" $R/gate-b1.log | head -12
   rm -f $R/gate-b1/heatmap.png; pack
   bench 8b-chain BATCHLAB_FAST_CHAIN=1 llama-3.1-8b 1 fast 3 200
   ncu_step 1b-chain BATCHLAB_FAST_CHAIN=1 llama-3.2-1b 1 fast 2 200 ;;
3) bash tools/h200/s44-next.sh 1; bash tools/h200/s44-next.sh 4 ;;
5) kernels_slices_benches 200
   bench 1b-chain2 BATCHLAB_FAST_CHAIN=1 llama-3.2-1b 1 fast 3 150
   BATCHLAB_FAST_CHAIN=1 timeout 120 python3 -m batchlab bench profile --model llama-3.2-1b \
     --batch 1 --prompt-len 128 --gen-len 128 --paths fast --repeats 3 --out $R/prof-1 \
     > $R/prof-1.log 2>&1
   echo "== profile chain=1: exit $?"; grep -E "^\| 1 \|" $R/prof-1.log; pack ;;
6) kernels_slices_benches 150 ;;
7) bash tools/h200/s44-next.sh 1
   R=$OUT/c7 TAG=c7; source tools/h200/bench-lib.sh
   timeout 150 python3 tools/h200/row_gqa_probe.py > $R/row-gqa.log 2>&1
   echo "== row-gqa: exit $?"; cat $R/row-gqa.log; pack
   bench inv-u4 BATCHLAB_ROW_ATTENTION_UNROLL=4 llama-3.1-8b 256 l1,invariant 2 200 ;;
esac

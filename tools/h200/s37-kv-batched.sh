# Issue 28, fourteenth round, fourth machine: s36's kv probe found fast's bytes changed
# with the k|v GEMM's column slices on llama (not qwen3, whose keys pass k_norm first).
# 1. kv_gemm_probe.py rope: RoPE on strided keys against contiguous ones (the suspect);
# 2. gqa_exact_probe.py kv again, the k|v product now one batched GEMM (2, rows, N) whose
#    halves are contiguous; 3. the paired step, k|v on and off; 4. the bench. ~7 minutes.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s37-kv-batched.sh
# (Ran with kv_product.py in the engine; it and gqa_exact_probe.py's kv part were removed
# at 999051c, so this script no longer runs as it did: reports/bench/cuda-sm90/issue28-kv/.)
set -u
R=$OUT/i TAG=i
source tools/h200/bench-lib.sh
for m in llama-3.2-1b@L1 llama-3.1-8b@L1; do
  timeout 60 python3 tools/h200/kv_gemm_probe.py rope --model $m >> $R/rope.log 2>&1
done
echo "== rope: exit $?"; cat $R/rope.log; pack
probe kv - kv 240
timeout 150 python3 tools/h200/kv_gemm_probe.py step --model llama-3.1-8b --batch 256 \
  --rounds 4 --variants kv-off,as-is > $R/step-8b.log 2>&1
echo "== step 8b: exit $?"; tail -2 $R/step-8b.log; pack
bench 8b-256 - llama-3.1-8b 256 fast,l1 3 150

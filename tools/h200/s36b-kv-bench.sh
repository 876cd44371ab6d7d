# Issue 28, fourteenth round, third machine, call 2 (warm): the fast step with the k|v
# GEMM against two GEMMs, paired in one process (kv_gemm_probe.py step), then the bench
# at llama-3.1-8b B=256 and llama-3.2-1b B=256. ~8 minutes.
# Run as: bash tools/h200/s36b-kv-bench.sh
# (Ran with kv_product.py in the engine; it and gqa_exact_probe.py's kv part were removed
# at 999051c, so this script no longer runs as it did: reports/bench/cuda-sm90/issue28-kv/.)
set -u
R=$OUT/h TAG=h
source tools/h200/bench-lib.sh
timeout 200 python3 tools/h200/kv_gemm_probe.py step --model llama-3.1-8b --batch 256 \
  --rounds 4 --variants kv-off,as-is > $R/step-8b.log 2>&1
echo "== step 8b: exit $?"; tail -2 $R/step-8b.log; pack
timeout 100 python3 tools/h200/kv_gemm_probe.py step --model llama-3.2-1b --batch 256 \
  --rounds 4 --variants kv-off,as-is > $R/step-1b.log 2>&1
echo "== step 1b: exit $?"; tail -2 $R/step-1b.log; pack
bench 8b-256 - llama-3.1-8b 256 fast,l1 3 200

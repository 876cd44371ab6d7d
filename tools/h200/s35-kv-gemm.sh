# Issue 28, fourteenth round, second machine: the narrow k/v GEMMs (kv_gemm_probe.py: one
# k|v GEMM's bits against the two at every row count, then the fast step paired with k|v
# fused, q/k/v fused, and k/v on a side stream), and the bench figure on this machine.
# ~8 minutes. Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s35-kv-gemm.sh
set -u
R=$OUT/f TAG=f
source tools/h200/bench-lib.sh
timeout 90 python3 tools/h200/kv_gemm_probe.py bits > $R/bits.log 2>&1
echo "== bits: exit $?"; grep -E "row counts|GEMMs" $R/bits.log; pack
timeout 240 python3 tools/h200/kv_gemm_probe.py step --model llama-3.1-8b --batch 256 \
  --rounds 3 > $R/step-8b.log 2>&1
echo "== step 8b: exit $?"; tail -4 $R/step-8b.log; pack
bench 8b-256 - llama-3.1-8b 256 fast,l1 3 200

# Issue 28 item 3, tenth round, call 3 (right after s26c, same machine): with the
# ring as the default,
# 1. fast's CUDA gate at 64 rows (the cells where the kernel runs), live goldens;
# 2. Nsight Compute: every kernel of one fast decode step at llama-3.1-8b B=256 (192 keys),
#    timed alone (tools/h200/step_kernels.py, ncu_summary.py): where the step goes;
# 3. the bench at llama-3.2-1b B 64 and 256: the ring (default) against no ring.
# Run as: bash tools/h200/s26b-ring-gate-ncu.sh (the bundle installed by the call before)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
timeout 100 python3 -m batchlab matrix run --matrix matrices/cuda.toml --live \
  --filter "fast/*/B64/*" --jobs 4 --report $R/gate > $R/gate.log 2>&1
echo "== fast CUDA gate, 64 rows: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/gate.log; pack
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 150 $NCU --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    python3 tools/h200/step_kernels.py llama-3.1-8b 256 fast 64 > $R/ncu-fast.csv 2> $R/ncu-fast.err
  echo "== ncu fast: exit $?"; tail -3 $R/ncu-fast.err
  python3 tools/h200/ncu_summary.py $R/ncu-fast.csv "8B B=256 fast (ring)" 2>&1 | tee $R/ncu-fast.txt; pack
fi
bench() {  # tag, ring (default: unset), model, batches, repeats, timeout
  if [ $2 = default ]; then unset BATCHLAB_GQA_RING; else export BATCHLAB_GQA_RING=$2; fi
  timeout $6 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 --gen-len 128 \
    --bandwidth 3352 --paths fast,l1 --repeats $5 --out $R/bench-$1-ring$2 > $R/bench-$1-ring$2.log 2>&1
  echo "== $3 B=$4, ring $2: exit $?"; grep -E "ms/step" $R/bench-$1-ring$2.log | head -3; pack
  unset BATCHLAB_GQA_RING
}
bench 1b default llama-3.2-1b 64,256 2 90
bench 1b 0 llama-3.2-1b 64,256 2 90
pack

# Issue 28, session 2026-12-02b, cycle 2, call 4 (after the staging calls): the row GEMM's
# launch shapes timed on the device alone (s19's times were the host's for all but the
# largest products): every product once under Nsight Compute, caches flushed before each
# kernel; then fast and l1 (with BatchGenerator and generate_step) on llama-3.2-1b at B
# 1, 64, 256: the table, every column but invariant's.
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s20-sweep-ncu.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/n; mkdir -p $R
pack() { tar czf $OUT/n.tgz -C $OUT n; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 240 $NCU --profile-from-start off --cache-control all --clock-control none \
  --metrics gpu__time_duration.sum --csv --page raw --print-units base \
  python3 tools/h200/row_gemm_sweep.py ncu > $R/sweep-ncu.csv 2> $R/sweep-ncu.err
echo "== ncu sweep: exit $?"; tail -3 $R/sweep-ncu.err
python3 tools/h200/row_gemm_sweep.py parse $R/sweep-ncu.csv > $R/sweep-ncu.txt 2>&1
grep -E "best|Error" $R/sweep-ncu.txt; pack
timeout 300 python3 -m batchlab bench --model llama-3.2-1b --batch 1,64,256 --prompt-len 128 \
  --gen-len 128 --bandwidth 3352 --paths fast,l1 --repeats 3 --out $R/table-1b > $R/table-1b.log 2>&1
echo "== table 1B: exit $?"; grep -E "ms/step" $R/table-1b.log; pack

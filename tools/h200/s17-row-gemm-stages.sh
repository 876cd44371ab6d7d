# Issue 28 item 1, call 4 (after the staging calls q1-q3): the tiled row GEMM four steps
# deep (cp.async, 48 KB) instead of two: the same arithmetic, so the probe's checks (rows
# at every M, tiled == split on every shape) certify its bits and s16's gate stands;
# then the bench: llama-3.2-1b at B 1, 8, 64, 256 and llama-3.1-8b at B 256.
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s17-row-gemm-stages.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/s; mkdir -p $R
pack() { tar czf $OUT/s.tgz -C $OUT s; }
QUICK=1 timeout 90 python3 tools/h200/row_gemm_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; grep -E "INVARIANT|ACCURATE|differ|FAR|^K=" $R/probe.txt | cut -c1-200; pack
grep -q "^ROW GEMM INVARIANT yes" $R/probe.txt || { echo "rows differ: stop"; exit 3; }
bench() {  # name, model, batches, repeats, timeout
  timeout $5 python3 -m batchlab bench --model $2 --batch $3 --prompt-len 128 --gen-len 128 \
    --bandwidth 3352 --paths l1,invariant --repeats $4 --out $R/$1 > $R/$1.log 2>&1
  echo "== bench $1: exit $?"; grep -E "^\| [0-9]+ \||^B=1 single" $R/$1/$2.md 2>/dev/null
  tail -2 $R/$1.log; pack
}
bench bench-1b llama-3.2-1b 1,8,64,256 2 150
bench bench-8b llama-3.1-8b 256 1 120

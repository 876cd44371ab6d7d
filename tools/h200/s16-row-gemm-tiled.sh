# Issue 28 item 1, call 4 (after the staging calls q1-q3): the row GEMM with its tiled
# kernel from 65 rows (same bits as the split kernel) and the 1024-row prefill block.
# 1. the probe (rows at every M, tiled == split, accuracy, time); 2. the invariant CUDA
# gate (matrices/invariant-cuda.toml less the real model, --live).
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s16-row-gemm-tiled.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/r.tgz -C $OUT r; }
timeout 170 python3 tools/h200/row_gemm_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; grep -v "rows equal at every (offset, m): True; rel RMS row_gemm \(.*\) cuBLAS \1$" $R/probe.txt | cut -c1-220; pack
grep -q "^ROW GEMM INVARIANT yes" $R/probe.txt || { echo "rows differ: stop"; exit 3; }
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
gate() {  # name, filter, timeout
  timeout $3 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live \
    --filter "$2" --jobs 15 --report $R/$1 > $R/$1.log 2>&1
  echo "== $1: exit $?"
  grep -E "^(FAIL|ERROR)" $R/$1.log | cut -c1-200 | head -20
  grep -E "cells passed|wall time" $R/$1.log; pack
}
gate B33 "/B33/" 130
gate B129-B64 "/B129/,/B64/" 150
gate B65 "/B65/" 110

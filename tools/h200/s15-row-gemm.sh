# Issue 28 item 1, call 4 (after the staging calls q1-q3): the invariant path's decode
# by the row GEMM (engine/kernels/row_gemm.py: rows independent of M, no padded block).
# 1. the probe: every row's bits at every M and offset, accuracy against cuBLAS, time;
# 2. the invariant CUDA gate (matrices/invariant-cuda.toml less the real model, --live).
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s15-row-gemm.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/r.tgz -C $OUT r; }
timeout 170 python3 tools/h200/row_gemm_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; cat $R/probe.txt | cut -c1-220; pack
grep -q "^ROW GEMM INVARIANT yes" $R/probe.txt || { echo "rows differ: stop"; exit 3; }
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
gate() {  # name, filter, timeout
  timeout $3 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live \
    --filter "$2" --jobs 15 --report $R/$1 > $R/$1.log 2>&1
  echo "== $1: exit $?"
  grep -E -A4 "^(FAIL|ERROR)" $R/$1.log | grep -v rerun | cut -c1-200 | head -40
  grep -E "cells passed|wall time" $R/$1.log; pack
}
gate B33 "/B33/" 130
gate B129-B64 "/B129/,/B64/" 150
gate B65 "/B65/" 110

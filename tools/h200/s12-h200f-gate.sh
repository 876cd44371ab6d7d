# Issue 28 item 1, h200f, call 4 (after the three staging calls q1-q3): the 256-row
# invariant block with RoPE split where MLX's launch would be refused (ropesplit.py).
# The probe (the refused launch, the split's bits, float32 GEMM accuracy at M 256 / 64 / 1),
# then the invariant CUDA gate at BATCHLAB_INVARIANT_ROW_BLOCK=256 (B33: the 8 ERROR and 3
# FAIL cells of issue28-block256-9dd3b85; B65, B129, B64), and the float32 MoE cells of
# B33 at the 64-row default beside them (the second judge's KL, same cells, both blocks).
# Run as: source .gpu-stage/h200f/q4/install.sh && bash .gpu-stage/h200f-code/s12-h200f-gate.sh
set -u
T=/tmp/h200f-tree
rm -rf $T && mkdir -p $T && tar cf - --exclude=./.gpu-stage . | tar xf - -C $T
tar xzf .gpu-stage/h200f-code/h200f.tgz -C $T && cd $T || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/g; mkdir -p $R
pack() { tar czf $OUT/g.tgz -C $OUT g; }
timeout 60 python3 tools/h200/rope_launch_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; cat $R/probe.txt; pack
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
gate() {  # name, row block, filter, timeout
  BATCHLAB_INVARIANT_ROW_BLOCK=$2 timeout $4 python3 -m batchlab matrix run \
    --matrix /tmp/inv-cuda.toml --live --filter "$3" --jobs 15 --report $R/$1 > $R/$1.log 2>&1
  echo "== $1 (row block $2): exit $?"
  grep -E -A4 "^(FAIL|ERROR)" $R/$1.log | grep -v rerun | cut -c1-200 | head -60
  grep -E "cells passed|wall time" $R/$1.log; pack
}
gate B33-256 256 "/B33/" 130
gate B33-64 64 "invariant/gemma4-26b/B33/*,invariant/gpt-oss/B33/*" 60
gate B129-B64-256 256 "/B129/,/B64/" 150
gate B65-256 256 "/B65/" 110

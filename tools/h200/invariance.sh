# Issue 20: which ops vary with B here, then the invariance gate on the invariant path.
source tools/h200/setup.sh
timeout 150 python3 tools/probes/cuda_ops.py 2>&1 | tee $OUT/cuda_ops.txt | tail -60
timeout 400 python3 -m batchlab matrix run --matrix matrices/invariant.toml --jobs 4 \
  --report $OUT/inv > $OUT/inv.log 2>&1
grep -E "^FAIL|passed|wall time" $OUT/inv.log | tail -30

# Issue 20 on the H200: the 32-128 filler needles (invariant-cuda.toml, a subset in one
# call's time), the negative control, and the seeded invariance bugs.
source tools/h200/setup.sh
timeout 330 python3 -m batchlab matrix run --matrix matrices/invariant-cuda.toml --jobs 6 \
  --filter '/B33/,/B65/,smollm2,llama/B129/,gemma3/B129/,gpt-oss/B129/,qwen3.5/B129/,mamba2/B129/,qwen3-moe/B129/' \
  --report $OUT/inv-cuda > $OUT/inv-cuda.log 2>&1; grep -E "^FAIL|passed|wall" $OUT/inv-cuda.log | tail -20
timeout 90 python3 -m batchlab matrix run --matrix matrices/invariant-control.toml --jobs 6 \
  --report $OUT/control > $OUT/control.log 2>&1; grep -E "^FAIL|passed|wall" $OUT/control.log | tail -20
timeout 150 python3 -m batchlab selftest --bug invariant > $OUT/selftest.log 2>&1; tail -8 $OUT/selftest.log

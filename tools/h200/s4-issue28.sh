# As run (call 2 of 3): the invariance step did not start (the matrix names the real
# model, whose GGUF the machine cannot fetch) and both benches hit their timeouts at
# B=256; s4b-issue28.sh is the follow-up call. See reports/bench/cuda-sm90/issue28-e6be8c1/.
# Issue 28 on the H200, the main call (after the staging call that copies .gpu-stage/a):
# the CUDA l1 parity slice and the invariance gate (the engine was just restructured,
# and the invariant path now prefills many prompts at once), then the table
# re-measured with every path. Results: $OUT/results.tgz (re-packed after every stage,
# so a stage cut short still leaves the ones before it) and the logs beside it.
#   source .gpu-stage/b/install.sh && bash tools/h200/s4-issue28.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used --format=csv > $R/gpu.txt 2>&1
git log -1 --format=%H > $R/commit.txt 2>/dev/null; python3 -c 'import mlx.core as mx, mlx_lm; print(mx.__version__, mlx_lm.__version__, mx.default_device())' >> $R/commit.txt 2>&1
cat $R/commit.txt $R/gpu.txt
timeout 100 python3 -m batchlab matrix run --matrix matrices/cuda.toml --filter 'l1/*' --jobs 12 \
  --report $R/l1-cuda > $R/l1-cuda.log 2>&1; grep -E "^FAIL|cells passed|wall" $R/l1-cuda.log | tail -12; pack
timeout 100 python3 -m batchlab matrix run --matrix matrices/invariant.toml --filter 'invariant/[!s]*' \
  --jobs 12 --report $R/inv > $R/inv.log 2>&1; grep -E "^FAIL|cells passed|wall" $R/inv.log | tail -12; pack
timeout 130 python3 -m batchlab bench --model llama-3.2-1b --batch 1,64,256 --prompt-len 128 --gen-len 128 \
  --paths fast,l1,invariant,kv8,kv4 --repeats 3 --out $R/bench > $R/bench-1b.log 2>&1; grep -E "B=|bandwidth|failed" $R/bench-1b.log; pack
timeout 180 python3 -m batchlab bench --model llama-3.1-8b --batch 1,256 --prompt-len 128 --gen-len 128 \
  --paths fast,l1,invariant,kv8,kv4 --repeats 3 --out $R/bench > $R/bench-8b.log 2>&1; grep -E "B=|failed" $R/bench-8b.log; pack
ls $R/bench

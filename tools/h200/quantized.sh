# Issue 18 (quantized KV on CUDA) and issue 16 (the real model's CUDA cells).
source tools/h200/setup.sh
timeout 200 python3 -m batchlab lab kl --model smollm2-135m --paths kv8,kv4,kvmix,kv4h \
  --reference l1 --rows 0 --length 512 --context 256 --batch 16 --out $OUT/lab-kl \
  > $OUT/lab-kl.log 2>&1; tail -25 $OUT/lab-kl.log
timeout 120 python3 -m batchlab golden regen --matrix matrices/cuda.toml --filter 'kv' --jobs 4 \
  > $OUT/kv-regen.log 2>&1; tail -5 $OUT/kv-regen.log
timeout 120 python3 -m batchlab matrix run --matrix matrices/cuda.toml --filter 'kv' --jobs 4 \
  --report $OUT/kv-cells > $OUT/kv-cells.log 2>&1; grep -E "^FAIL|passed|wall" $OUT/kv-cells.log
timeout 100 python3 -m batchlab matrix run --filter 'kv8/smollm2,kv4/smollm2' --live --jobs 2 \
  --report $OUT/kv-smollm2-live > $OUT/kv-smollm2-live.log 2>&1; grep -E "^FAIL|passed|wall" $OUT/kv-smollm2-live.log
timeout 100 python3 -m batchlab matrix run --matrix matrices/real.toml --jobs 4 \
  --report $OUT/real-cells > $OUT/real-cells.log 2>&1; grep -E "^FAIL|passed|wall" $OUT/real-cells.log
tar czf $OUT/kv-goldens.tgz goldens/cuda-sm90

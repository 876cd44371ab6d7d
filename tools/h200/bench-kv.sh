# Issue 18: decode ms/step of the quantized-KV paths against l1 and mlx-lm, real shapes.
source tools/h200/setup.sh
timeout 560 python3 -m batchlab bench --model llama-3.2-1b --batch 1,4,16,64 --prompt-len 128 \
  --gen-len 128 --paths l1,kv8,kv4,kvmix --repeats 3 --out $OUT/bench-kv 2>&1 | tail -30

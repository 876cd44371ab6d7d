# Issue 18 on the H200: quality against bf16 on the real model (the whole corpus), then
# decode ms/step of the quantized paths against l1 and mlx-lm on a real shape.
source tools/h200/setup.sh
timeout 240 python3 -m batchlab lab kl --model smollm2-135m --paths kv8,kv4,kvmix,kv4h \
  --reference l1 --rows 0 --length 512 --context 256 --batch 16 --out $OUT/lab-kl \
  > $OUT/lab-kl.log 2>&1; tail -22 $OUT/lab-kl.log
timeout 300 python3 -m batchlab bench --model llama-3.2-1b --batch 1,4,16,64 --prompt-len 128 \
  --gen-len 128 --paths l1,kv8,kv4,kvmix --repeats 3 --out $OUT/bench-kv 2>&1 | tail -8

# Issue 18 on the H200, after the CUDA attention fix (dequantize, then fused attention):
# lab kl on part of the corpus, then a short bench. Kept short: the session's device time.
source tools/h200/setup.sh
timeout 150 python3 -m batchlab lab kl --model smollm2-135m --paths kv8,kv4,kvmix,kv4h \
  --reference l1 --rows 16 --length 512 --context 256 --batch 16 --out $OUT/lab-kl \
  > $OUT/lab-kl.log 2>&1; tail -14 $OUT/lab-kl.log
timeout 90 python3 -m batchlab bench --model llama-3.2-1b --batch 1,16,64 --prompt-len 128 \
  --gen-len 64 --paths l1,kv8,kv4 --repeats 2 --out $OUT/bench-kv 2>&1 | grep -v "^|" | tail -4

# Issue 20's cost on the H200: decode ms/step of invariant against l1, BatchGenerator and
# generate_step, B 1..256, a real shape.
source tools/h200/setup.sh
timeout 540 python3 -m batchlab bench --model llama-3.2-1b --batch 1,4,16,64,256 --prompt-len 128 \
  --gen-len 128 --paths l1,invariant --repeats 3 --out $OUT/bench-invariant 2>&1 | tail -12

# Issue 28, h200c, call 5, as run (inline, the warm machine after s7b): the 8B
# table shapes for l1, kv8 and kv4 beside BatchGenerator and generate_step.
cd /tmp/h200c-tree && export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/u && mkdir -p $R
timeout 170 python3 -m batchlab bench --paths l1,kv8,kv4 --repeats 2 --bandwidth 3352 --model llama-3.1-8b \
  --batch 1,256 --prompt-len 128 --gen-len 128 --out $R/b8t > $R/bench-8b.log 2>&1
grep -E "B=|rror" $R/bench-8b.log | tail -5

# Issue 28 item 1, call 5 (warm, after s16): invariant (row GEMM decode, 1024-row prefill
# block) against l1 and mlx-lm at B 1, 8, 64, 256 on llama-3.2-1b, decode and prefill,
# 3 repeats; then llama-3.1-8b at B 1 and 256 if the time allows.
# Run as: bash tools/h200/s16b-row-gemm-bench.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
bench() {  # name, model, batches, repeats, timeout
  timeout $5 python3 -m batchlab bench --model $2 --batch $3 --prompt-len 128 --gen-len 128 \
    --bandwidth 3352 --paths l1,invariant --repeats $4 --out $R/$1 > $R/$1.log 2>&1
  echo "== bench $1: exit $?"; grep -E "^\| [0-9]+ \||^B=1 single" $R/$1/$2.md 2>/dev/null
  tail -3 $R/$1.log; pack
}
bench bench-1b llama-3.2-1b 1,8,64,256 3 330
bench bench-8b llama-3.1-8b 1,256 2 220

# Issue 28 item 1, call 5 (warm, after s15-row-gemm.sh): invariant (decode by the row
# GEMM) against l1 and mlx-lm at B 1, 8, 64, 256 on llama-3.2-1b, decode and prefill;
# then the prefill block at 1024 rows (BATCHLAB_INVARIANT_ROW_BLOCK) at B 1 and 256.
# Run as: bash tools/h200/s15b-row-gemm-bench.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
bench() {  # name, row block, batches, timeout
  BATCHLAB_INVARIANT_ROW_BLOCK=$2 timeout $4 python3 -m batchlab bench --model llama-3.2-1b \
    --batch $3 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
    --repeats 2 --out $R/$1 > $R/$1.log 2>&1
  echo "== bench $1 (row block $2): exit $?"; cat $R/$1/*.md 2>/dev/null | head -40
  tail -5 $R/$1.log; pack
}
bench bench-1b 256 1,8,64,256 300
bench bench-1b-1024 1024 1,256 200

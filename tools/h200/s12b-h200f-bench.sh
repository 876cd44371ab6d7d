# Issue 28, h200f, call 5 (warm machine, after s12-h200f-gate.sh unpacked the tree):
# invariant (256-row block) against l1 and mlx-lm at B 1, 8, 64, 256 on llama-3.2-1b in
# one run (decode and prefill), then ops per decode submit per engine at B=1
# (tools/h200/opcount.py: llama-3.2-1b fast / l1 / invariant, qwen3-0.6b fast / l1).
# Run as: cd /tmp/h200f-tree && bash tools/h200/s12b-h200f-bench.sh
set -u
cd /tmp/h200f-tree || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
BATCHLAB_INVARIANT_ROW_BLOCK=256 timeout 260 python3 -m batchlab bench --model llama-3.2-1b \
  --batch 1,8,64,256 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
  --repeats 2 --out $R/bench-1b > $R/bench-1b.log 2>&1
echo "== bench 1b (row block 256): exit $?"; grep -E "B=|failed|tok/s" $R/bench-1b.log | tail -30
cat $R/bench-1b/*.md 2>/dev/null | head -40; pack
BATCHLAB_INVARIANT_ROW_BLOCK=256 timeout 90 python3 tools/h200/opcount.py llama-3.2-1b \
  fast,l1,invariant 1 > $R/opcount-1b.txt 2>&1
echo "== opcount 1b: exit $?"; cat $R/opcount-1b.txt; pack
timeout 60 python3 tools/h200/opcount.py qwen3-0.6b fast,l1 1 > $R/opcount-q06.txt 2>&1
echo "== opcount qwen3-0.6b: exit $?"; cat $R/opcount-q06.txt; pack
BATCHLAB_FAST_FUSE=1 timeout 45 python3 tools/h200/opcount.py llama-3.2-1b fast 1 > $R/opcount-1b-fuse.txt 2>&1
echo "== opcount 1b, BATCHLAB_FAST_FUSE=1: exit $?"; cat $R/opcount-1b-fuse.txt; pack

# Issue 28, h200d, call 4 (straight after s9-h200d-profile.sh, on the warm machine, from
# the tree it unpacked in /tmp/h200d-tree): the bench, fast after (its defaults) and
# before (BATCHLAB_FAST_GQA=0 BATCHLAB_FAST_FUSE=0) against l1 and mlx-lm in the same
# runs, and fast's KL gate with and without the new parts. If the grouped kernel failed
# its probe in call 3, "after" runs without it (BATCHLAB_FAST_GQA=0).
# Run as: bash .gpu-stage/h200d/s9b-h200d-bench.sh
set -u
cd /tmp/h200d-tree || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
GQA=1; [ -f /tmp/h200d-gqa-ok ] || GQA=0; echo "grouped kernel in 'after': $GQA" | tee $R/config.txt
OFF="env BATCHLAB_FAST_GQA=0 BATCHLAB_FAST_FUSE=0"
ON="env BATCHLAB_FAST_GQA=$GQA BATCHLAB_FAST_FUSE=1"
B="python3 -m batchlab bench --prompt-len 128 --gen-len 128 --bandwidth 3352"
run() { local name=$1 t=$2; shift 2; timeout $t "$@" > $R/$name.log 2>&1
  echo "== $name: exit $?"; grep -E "B=|rror|passed" $R/$name.log | tail -6; pack; }
run 8b-256-after 130 $ON $B --model llama-3.1-8b --batch 256 --paths fast,l1 --repeats 3 --out $R/8b-256-after
run 8b-256-before 90 $OFF $B --model llama-3.1-8b --batch 256 --paths fast --repeats 2 --out $R/8b-256-before
run b1-after 90 $ON $B --model llama-3.2-1b,qwen3-0.6b --batch 1 --paths fast,l1 --repeats 5 --out $R/b1-after
run b1-before 70 $OFF $B --model llama-3.2-1b,qwen3-0.6b --batch 1 --paths fast --repeats 5 --out $R/b1-before
K="python3 -m batchlab lab kl --paths fast --rows 32 --length 256 --context 64 --batch 16"
for m in qwen3-hd128 llama-hd64; do
  run kl-$m-after 75 $ON $K --model $m --out $R/kl-$m-after
  grep -E "^(fast|same)" $R/kl-$m-after.log | head -4
  run kl-$m-before 45 $OFF $K --model $m --out $R/kl-$m-before
  grep -E "^(fast|same)" $R/kl-$m-before.log | head -4
done
run 1b-table 80 $ON $B --model llama-3.2-1b --batch 64,256 --paths fast,l1,invariant --repeats 2 --out $R/1b-table
run 8b-b1 60 $ON $B --model llama-3.1-8b --batch 1 --paths fast,l1 --repeats 3 --out $R/8b-b1
ls -R $R | head -40

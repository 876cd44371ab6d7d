# Issue 28, h200e, call 4 (straight after s10-h200e-exact.sh, warm machine, its tree in
# /tmp/h200e-tree): the bench, fast with the exact grouped kernel (the default) against
# l1 and mlx-lm in the same run, then fast without it, and with the q/k/v fusion.
# Run as: bash .gpu-stage/h200e/s10b-h200e-bench.sh
set -u
cd /tmp/h200e-tree || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
B="python3 -m batchlab bench --prompt-len 128 --gen-len 128 --bandwidth 3352"
run() { local name=$1 t=$2; shift 2; timeout $t "$@" > $R/$name.log 2>&1
  echo "== $name: exit $?"; grep -E "B=|rror" $R/$name.log | tail -6; pack; }
run 8b-256 130 $B --model llama-3.1-8b --batch 256 --paths fast,l1 --repeats 2 --out $R/8b-256
run 8b-256-off 75 env BATCHLAB_FAST_GQA=0 $B --model llama-3.1-8b --batch 256 --paths fast --repeats 2 --out $R/8b-256-off
run 8b-256-fuse 75 env BATCHLAB_FAST_FUSE=1 $B --model llama-3.1-8b --batch 256 --paths fast --repeats 2 --out $R/8b-256-fuse
run 1b 110 $B --model llama-3.2-1b --batch 1,64,256 --paths fast,l1,invariant --repeats 2 --out $R/1b
run b1 80 $B --model qwen3-0.6b,llama-3.1-8b --batch 1 --paths fast,l1 --repeats 3 --out $R/b1
ls -R $R | head -30

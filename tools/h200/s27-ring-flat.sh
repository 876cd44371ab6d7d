# Issue 28, tenth round, the second machine (s26's call left its ring choice slower than
# no ring; its probe table chose (W, R) = (8, 4) at the 8B heads and (16, 4) elsewhere,
# which s26 already checked bit for bit). ~8 minutes:
# in order of need (each step packs its output: a cut call keeps what ran):
# 1. the bench at llama-3.1-8b B=256, fast and l1: the new default against no ring
#    (BATCHLAB_GQA_RING=0);
# 2. the bench at B=1, fast (generate_step and BatchGenerator in the same process),
#    llama-3.2-1b, the flat forward against the modules' (BATCHLAB_FAST_FLAT=0);
# 3. tools/h200/opcount.py llama-3.2-1b fast, both forwards;
# 4. as 2 on qwen3-0.6b;
# 5. 8B B=256 with no ring and the modules' forward (last round's default);
# 6. the bench at llama-3.2-1b B 64 and 256: the new default against no ring.
# Run as (after the bundle's install.sh): bash tools/h200/s27-ring-flat.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
bench() {  # tag, env (k=v,k=v or -), model, batches, paths, repeats, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 \
    --gen-len 128 --bandwidth 3352 --paths $5 --repeats $6 --out $R/bench-$1 > $R/bench-$1.log 2>&1
  echo "== $1 ($3 B=$4, $2): exit $?"; grep -E "ms/step" $R/bench-$1.log | head -2; pack
}
bench 8b-default - llama-3.1-8b 256 fast,l1 2 90
bench 8b-ring0 BATCHLAB_GQA_RING=0 llama-3.1-8b 256 fast,l1 2 90
bench 1b-b1-flat - llama-3.2-1b 1 fast 5 50
bench 1b-b1-flat0 BATCHLAB_FAST_FLAT=0 llama-3.2-1b 1 fast 5 50
for f in 1 0; do
  BATCHLAB_FAST_FLAT=$f timeout 40 python3 tools/h200/opcount.py llama-3.2-1b fast > $R/opcount-flat$f.txt 2>&1
  echo "== opcount, flat $f: exit $?"; tail -1 $R/opcount-flat$f.txt; pack
done
bench q06-b1-flat - qwen3-0.6b 1 fast 5 50
bench q06-b1-flat0 BATCHLAB_FAST_FLAT=0 qwen3-0.6b 1 fast 5 50
bench 8b-ring0-flat0 BATCHLAB_GQA_RING=0,BATCHLAB_FAST_FLAT=0 llama-3.1-8b 256 fast,l1 2 90
bench 1b-default - llama-3.2-1b 64,256 fast,l1 2 60
bench 1b-ring0 BATCHLAB_GQA_RING=0 llama-3.2-1b 64,256 fast,l1 2 60
pack

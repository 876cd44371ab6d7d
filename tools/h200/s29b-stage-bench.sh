# Issue 28, twelfth round, call 2 (warm, after s29-stage.sh): the decode step with the
# staged kernel (BATCHLAB_GQA_STAGE=1, W from STAGE_W) against the default, fast and l1 in
# the same process. ~8 minutes, each step packs its output.
# Run as: STAGE_W=16 bash tools/h200/s29b-stage-bench.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/b; mkdir -p $R
pack() { tar czf $OUT/b.tgz -C $OUT b; }
bench() {  # tag, env (k=v,k=v or -), model, batches, paths, repeats, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 \
    --gen-len 128 --bandwidth 3352 --paths $5 --repeats $6 --out $R/bench-$1 > $R/bench-$1.log 2>&1
  echo "== $1 ($3 B=$4, $2): exit $?"; grep -E "ms/step" $R/bench-$1.log | head -2; pack
}
S="BATCHLAB_GQA_STAGE=1,BATCHLAB_GQA_WARPS=${STAGE_W:-16}"
bench 8b-stage $S llama-3.1-8b 256 fast,l1 2 100
bench 8b-default - llama-3.1-8b 256 fast,l1 2 100
bench 8b-stage-2 $S llama-3.1-8b 256 fast,l1 2 100
bench 1b-stage $S llama-3.2-1b 64,256 fast,l1 2 70
bench 1b-default - llama-3.2-1b 64,256 fast,l1 2 70
pack

# Sourced by the device scripts: the environment, $R under $OUT, pack() and bench().
# Set R and TAG first (e.g. R=$OUT/b TAG=b); the earlier scripts (s27, s28) spell these
# out themselves, as they ran.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
mkdir -p "$R"
pack() { tar czf "$OUT/$TAG.tgz" -C "$OUT" "$TAG"; }
bench() {  # tag, env (k=v,k=v or -), model, batches, paths, repeats, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 \
    --gen-len 128 --bandwidth 3352 --paths $5 --repeats $6 --out $R/bench-$1 > $R/bench-$1.log 2>&1
  echo "== $1 ($3 B=$4, $2): exit $?"; grep -E "ms/step" $R/bench-$1.log | head -2; pack
}

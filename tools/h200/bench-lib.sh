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
# Nsight Compute over one decode step (step_kernels.py), every kernel serialized and
# timed alone, then its summary by kernel family (ncu_summary.py); s28b spells it out
ncu_step() {  # tag, env (k=v,k=v or -), model, B, path, warm steps, timeout
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 $NCU --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    python3 tools/h200/step_kernels.py $3 $4 $5 $6 > $R/ncu-$1.csv 2> $R/ncu-$1.err
  echo "== ncu $1: exit $?"; tail -3 $R/ncu-$1.err
  python3 tools/h200/ncu_summary.py $R/ncu-$1.csv "$3 B=$4 $5 $2" 2>&1 | tee $R/ncu-$1.txt; pack
}
# gqa_exact_probe.py's part, its log under $R, its verdict lines printed
probe() {  # tag, env (k=v,k=v or -), part, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $4 python3 tools/h200/gqa_exact_probe.py $3 > $R/probe-$1.log 2>&1
  echo "== probe $1 ($3, $2): exit $?"; head -10 $R/probe-$1.log | grep -v "^fast"
  grep -E "EXACT|DIFFER|comparisons|SAME|equal: False" $R/probe-$1.log; pack
}
# A matrix's cells run --live --repeat on the GPU (s49-next.sh's gate, moved here)
gate_live() {  # tag, env (k=v,k=v or -), matrix, filter
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout 280 python3 -m batchlab matrix run --matrix $3 --live --repeat \
    --filter "$4" --jobs 8 --report $R/$1 > $R/$1.log 2>&1
  echo "== gate $1 ($2): exit $?"; grep -E "cells passed|FAIL|not repeatable" $R/$1.log | head -12
  rm -f $R/$1/heatmap.png; pack
}

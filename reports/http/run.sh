#!/bin/bash
# The HTTP results table: for each zoo model, `batchlab http check` against
# `batchlab serve --path l1`, `batchlab serve --path invariant` and mlx_lm.server on the
# same model directory, one server at a time on port 8821.
#   reports/http/run.sh llama gemma3 qwen3.5 gpt-oss      (about 90 s a model on 2 cores)
# Writes $OUT/<model>-<server>.jsonl (the results) and .txt (the console).
set -u
OUT=${OUT:-reports/http/results}
mkdir -p "$OUT"
for m in "$@"; do
  dir=$(python -c "from batchlab.zoo import resolve; print(resolve('$m'))")
  for srv in ${SERVERS:-l1 invariant mlx}; do
    if [ "$srv" = mlx ]; then
      python -m mlx_lm.server --model "$dir" --port 8821 > "$OUT/$m-$srv.server.log" 2>&1 &
    else
      batchlab serve --model "$m" --path "$srv" --port 8821 > "$OUT/$m-$srv.server.log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 60); do curl -s localhost:8821/v1/models > /dev/null && break; sleep 0.5; done
    batchlab http check --url http://127.0.0.1:8821 --model "$m" \
      --json "$OUT/$m-$srv.jsonl" > "$OUT/$m-$srv.txt" 2>&1
    echo "$m $srv: exit $?"
    kill $pid; wait $pid 2>/dev/null
    rm -f "$OUT/$m-$srv.server.log"
  done
done

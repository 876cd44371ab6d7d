#!/bin/sh
# The long-prompt table: three servers on the zoo llama, loaded one after another by the
# same command (so each level of each sees the same machine load). "before" is the code
# at 18808d7 (git archive into /tmp/before-src), the others this branch.
set -e
R=reports/serve-long-prompt
(cd /tmp && PYTHONPATH=/tmp/before-src python -m batchlab serve --model llama --port 8141 > $OLDPWD/$R/run/before.log 2>&1) & P1=$!
batchlab serve --model llama --port 8142 > $R/run/after-512.log 2>&1 & P2=$!
batchlab serve --model llama --port 8143 --prefill-step-size 256 > $R/run/after-256.log 2>&1 & P3=$!
sleep 15
batchlab load --target before-2048=http://127.0.0.1:8141 --target after-512=http://127.0.0.1:8142 \
    --target after-256=http://127.0.0.1:8143 --model llama --concurrency 4,16 --long-prompt 9000 \
    --prompt-len 32:8 --output-len 64:16 --out $R/run || true
kill $P1 $P2 $P3

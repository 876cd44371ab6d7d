# Issue 28, eleventh round, second machine, the call after s28d-qwen3.sh (typed inline on
# the warm machine; this is what ran): bench profile of fast at B=1, one-row fusion on and
# off, llama-3.2-1b and qwen3-0.6b, two interleaved rounds: where fusion moves the host's
# time (forward build against submit).
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc; R=$OUT/r; mkdir -p $R; for i in 1 2; do for m in qwen3-0.6b llama-3.2-1b; do for f in 1 0; do BATCHLAB_FAST_ONE_ROW=$f timeout 90 python3 -m batchlab bench profile --model $m --batch 1 --prompt-len 128 --gen-len 128 --paths fast --repeats 1 --out $R/p-$m-$f-$i > $R/p-$m-$f-$i.log 2>&1; echo "$i $m one=$f: $(grep -E '^\| 1 \| fast' $R/p-$m-$f-$i.log)"; done; done; tar czf $OUT/r.tgz -C $OUT r; done

# Issue 28, eleventh round, the call after s28b-profile.sh (typed inline on the warm
# machine; this is what ran): the B=1 bench of fast, one-row fusion on and off, two
# interleaved rounds over qwen3-0.6b, llama-3.1-8b and llama-3.2-1b (generate_step and
# BatchGenerator in each run).
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc; R=$OUT/a; mkdir -p $R; for i in 1 2; do for m in qwen3-0.6b llama-3.1-8b llama-3.2-1b; do for f in 1 0; do BATCHLAB_FAST_ONE_ROW=$f timeout 60 python3 -m batchlab bench --model $m --batch 1 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths fast --repeats 3 --out $R/b-$m-$f-$i > $R/b-$m-$f-$i.log 2>&1; echo "$i $m one=$f: $(grep -E 'B=1: fast' $R/b-$m-$f-$i.log)"; done; done; tar czf $OUT/a.tgz -C $OUT a; done

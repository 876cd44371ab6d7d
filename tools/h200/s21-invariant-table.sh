# Issue 28, session 2026-12-02b, cycle 2, call 6 (warm, after s20b; the tiled kernel's
# default just switched to min_blocks=2): invariant against l1 (with BatchGenerator and
# generate_step) on llama-3.2-1b at B 1, 64, 256 and llama-3.1-8b at B 1, 256: the
# invariant column of the table. Ran inline as this one command line.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc; R=$OUT/i; mkdir -p $R; python3 -c 'import mlx.core as mx; print(mx.default_device())' || exit 9; for spec in "1b llama-3.2-1b 1,64,256 3 250" "8b llama-3.1-8b 1,256 2 200"; do set -- $spec; timeout $5 python3 -m batchlab bench --model $2 --batch $3 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant --repeats $4 --out $R/inv-$1 > $R/inv-$1.log 2>&1; echo "== $1: exit $?"; grep -E "ms/step" $R/inv-$1.log | head -5; grep -E "^\| [0-9]+ \|" $R/inv-$1/$2.md | awk -F'|' '{print $2,$3,$4,$15,$16,$17}'; tar czf $OUT/i.tgz -C $OUT i; done

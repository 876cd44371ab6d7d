# Issue 28, session 2026-12-02b, cycle 2, call 5 (warm): fast and l1 (with BatchGenerator
# and generate_step) on llama-3.1-8b at B 1 and 256: the table, every column but
# invariant's. Run as: bash tools/h200/s20b-table-8b.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/t; mkdir -p $R
pack() { tar czf $OUT/t.tgz -C $OUT t; }
timeout 420 python3 -m batchlab bench --model llama-3.1-8b --batch 1,256 --prompt-len 128 \
  --gen-len 128 --bandwidth 3352 --paths fast,l1 --repeats 2 --out $R/table-8b > $R/table-8b.log 2>&1
echo "== table 8B: exit $?"; grep -E "ms/step" $R/table-8b.log; pack

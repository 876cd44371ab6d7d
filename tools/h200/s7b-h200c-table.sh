# Issue 28, h200c, call 4 (the warm machine after s7-h200c-probes.sh, from /tmp/h200c-tree):
# the table shapes for l1, kv8 and kv4 (the quantized paths with the packed-cache
# decode kernel), then the 8B B=256 kernel-class profile (item 3).
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/t; mkdir -p $R
pack() { tar czf $OUT/t.tgz -C $OUT t; }
B="python3 -m batchlab bench --paths l1,kv8,kv4 --prompt-len 128 --gen-len 128 --repeats 2 --bandwidth 3352"
timeout 150 $B --model llama-3.2-1b --batch 1,64,256 --out $R/bench > $R/bench-1b.log 2>&1
grep -E "B=|rror" $R/bench-1b.log | tail -14; pack
timeout 170 $B --model llama-3.1-8b --batch 1,256 --out $R/bench > $R/bench-8b.log 2>&1
grep -E "B=|rror" $R/bench-8b.log | tail -10; pack
timeout 60 python3 tools/h200/opprofile.py 256 192 > $R/opprofile.txt 2>&1; tail -30 $R/opprofile.txt; pack

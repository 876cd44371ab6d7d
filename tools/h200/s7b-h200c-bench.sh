# Issue 28, h200c, call 4 (the warm machine after s7-h200c-probes.sh, from /tmp/h200c-tree):
# llama-3.1-8b where KV bytes dominate (B 32 and 64 at 2048 tokens of context), then the
# issue's table shapes (128 + 128 tokens), l1, kv8 and kv4 (the quantized paths with the
# packed-cache decode kernel) beside BatchGenerator; the 8B B=256 profile last, if time.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/t; mkdir -p $R
pack() { tar czf $OUT/t.tgz -C $OUT t; }
B="python3 -m batchlab bench --paths l1,kv8,kv4 --repeats 2 --bandwidth 3352"
timeout 150 $B --model llama-3.1-8b --batch 32,64 --prompt-len 2048 --gen-len 64 --out $R/bench-8b-2k > $R/bench-8b-2k.log 2>&1
grep -E "B=|rror" $R/bench-8b-2k.log | tail -8; pack
timeout 130 $B --model llama-3.2-1b --batch 1,64,256 --prompt-len 128 --gen-len 128 --out $R/bench-table > $R/bench-1b.log 2>&1
grep -E "B=|rror" $R/bench-1b.log | tail -8; pack
timeout 150 $B --model llama-3.1-8b --batch 1,256 --prompt-len 128 --gen-len 128 --out $R/bench-table > $R/bench-8b.log 2>&1
grep -E "B=|rror" $R/bench-8b.log | tail -8; pack
timeout 50 python3 tools/h200/opprofile.py 256 192 > $R/opprofile.txt 2>&1; tail -30 $R/opprofile.txt; pack

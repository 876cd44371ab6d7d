# Issue 28, h200c, call 4, as run (typed inline on the warm machine within its 30 s idle
# window, after s7-h200c-probes.sh skipped its bench: qkv_decode_probe.py hit its 90 s
# timeout before its "QKV OK" line, though every row it printed was inside its check).
# From /tmp/h200c-tree: llama-3.2-1b B 64 at 2048 tokens of context, llama-3.1-8b B 32
# and 64 at 2048 (B 64 did not finish inside 150 s), then the 1B table shapes.
cd /tmp/h200c-tree && export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/t && mkdir -p $R
B="python3 -m batchlab bench --paths l1,kv8,kv4 --repeats 2 --bandwidth 3352"
timeout 75 $B --model llama-3.2-1b --batch 64 --prompt-len 2048 --gen-len 64 --out $R/b1k > $R/bench-1b-2k.log 2>&1
grep -E "B=|rror" $R/bench-1b-2k.log | tail -4; tar czf $OUT/t.tgz -C $OUT t
timeout 150 $B --model llama-3.1-8b --batch 32,64 --prompt-len 2048 --gen-len 64 --out $R/b8k > $R/bench-8b-2k.log 2>&1
grep -E "B=|rror" $R/bench-8b-2k.log | tail -4; tar czf $OUT/t.tgz -C $OUT t
timeout 120 $B --model llama-3.2-1b --batch 1,64,256 --prompt-len 128 --gen-len 128 --out $R/bt > $R/bench-1b.log 2>&1
grep -E "B=|rror" $R/bench-1b.log | tail -4; tar czf $OUT/t.tgz -C $OUT t

# Issue 28, h200d, second session, call 3 (after the two staging calls, as in
# s9-h200d-profile.sh): the grouped kernel with its loads in one straight line
# (unconditional, clamped rows), q/k/v fused only (gate/up was slower fused) and only
# from 64 rows. Probe, then the 8B B=256 bench (fast, l1, BatchGenerator), then fast's
# KL (cut to fit the device time left: no B=1 bench, one lab kl model).
# Run as: source .gpu-stage/h200b/p3/install.sh && bash .gpu-stage/h200d/s9c-h200d-kernel2.sh
set -u
T=/tmp/h200d-tree
rm -rf $T && mkdir -p $T && tar cf - --exclude=./.gpu-stage . | tar xf - -C $T
tar xzf .gpu-stage/h200d/h200d.tgz -C $T && cd $T || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/c; mkdir -p $R
pack() { tar czf $OUT/c.tgz -C $OUT c; }
timeout 50 python3 tools/h200/gqa_decode_probe.py > $R/gqa-probe.txt 2>&1; cat $R/gqa-probe.txt; pack
GQA=1; grep -q "^GQA OK yes" $R/gqa-probe.txt || GQA=0; echo "grouped kernel: $GQA" | tee $R/config.txt
B="python3 -m batchlab bench --prompt-len 128 --gen-len 128 --bandwidth 3352"
timeout 110 env BATCHLAB_FAST_GQA=$GQA $B --model llama-3.1-8b --batch 256 --paths fast,l1 --repeats 2 \
  --out $R/8b-256 > $R/8b-256.log 2>&1; echo "== 8b-256: exit $?"; grep -E "B=|rror" $R/8b-256.log; pack
# fast's KL against l1 with the kernel and without fusion (B=16 < 64 rows), as in s9b
K="python3 -m batchlab lab kl --paths fast --rows 32 --length 256 --context 64 --batch 16"
for m in qwen3-hd128; do
  timeout 45 env BATCHLAB_FAST_GQA=$GQA $K --model $m --out $R/kl-$m > $R/kl-$m.log 2>&1
  echo "== kl $m: exit $?"; grep -E "^(fast|same)" $R/kl-$m.log | head -3; pack
done

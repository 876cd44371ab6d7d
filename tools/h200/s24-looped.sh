# The grouped decode kernel's third layout, looped (engine/kernels/grouped_decode_looped.py:
# a block of W = 8 warps per (row, KV head), 4 of MLX's 32 key streams a warp, the merge
# through shared memory; never run on a GPU before this script). ~6 minutes:
# 1. tools/h200/gqa_exact_probe.py looped: its output against
#    mx.fast.scaled_dot_product_attention bit for bit on every shape the probe checks
#    (W = 8; W = 4, 16 and 8 with the L2 prefetch on the 8B and G = 8 shapes), then
#    the timing table (looped at W = 4, 8, 16 and 8 with the prefetch against staged,
#    simple and MLX at llama-3.1-8b's heads, B 256 and 64);
# 2. only if step 1 printed `EXACT OK yes`: the bench at llama-3.1-8b B=256, fast and l1,
#    with BATCHLAB_GQA_LAYOUT=looped and with the default layout (staged).
# Run as (after the bundle's install.sh, tools/h200/stage-bundle.sh): bash tools/h200/s24-looped.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/g; mkdir -p $R
pack() { tar czf $OUT/g.tgz -C $OUT g; }
timeout 120 python3 tools/h200/gqa_exact_probe.py looped > $R/probe.log 2>&1
echo "== probe (looped): exit $?"; cat $R/probe.log; pack
if grep -q "^EXACT OK yes" $R/probe.log; then
  for lay in looped default; do
    if [ $lay = looped ]; then export BATCHLAB_GQA_LAYOUT=looped; else unset BATCHLAB_GQA_LAYOUT; fi
    timeout 150 python3 -m batchlab bench --model llama-3.1-8b --batch 256 --prompt-len 128 \
      --gen-len 128 --bandwidth 3352 --paths fast,l1 --repeats 2 --out $R/bench-8b-$lay \
      > $R/bench-8b-$lay.log 2>&1
    echo "== 8B B=256, layout $lay: exit $?"; grep -E "ms/step" $R/bench-8b-$lay.log | head -4; pack
  done
  unset BATCHLAB_GQA_LAYOUT
else
  echo "== looped not exact (or the probe did not finish): no bench"
fi
pack

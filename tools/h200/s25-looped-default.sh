# Issue 28 item 3: looped as the grouped decode kernel's default layout, W = 16 from 160
# keys (s24: exact at W = 8; W = 16 the faster from 192 keys). ~6 minutes:
# 1. tools/h200/gqa_exact_probe.py looped: W = 8, W = 16 and the default choice on every
#    shape bit for bit, then the timing table (8B, 1B and qwen3-0.6b heads);
# 2. tools/h200/gqa_exact_probe.py fast: fast's tokens and logprob bytes with the kernel
#    (default layout) equal to without it, three models;
# 3. the bench at llama-3.1-8b B=256, fast and l1, default against staged;
# 4. fast's CUDA gate at 64 rows (the cells where the kernel runs), live goldens;
# 5. the bench at llama-3.2-1b B 64 and 256, default against staged.
# Run as (after the bundle's install.sh, tools/h200/stage-bundle.sh): bash tools/h200/s25-looped-default.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
timeout 150 python3 tools/h200/gqa_exact_probe.py looped > $R/probe.log 2>&1
echo "== probe (looped): exit $?"; cat $R/probe.log; pack
timeout 100 python3 tools/h200/gqa_exact_probe.py fast > $R/fast.log 2>&1
echo "== probe (fast): exit $?"; cat $R/fast.log; pack
bench() {  # tag, layout (default: unset), model, batches, repeats, timeout
  if [ $2 = default ]; then unset BATCHLAB_GQA_LAYOUT; else export BATCHLAB_GQA_LAYOUT=$2; fi
  timeout $6 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 --gen-len 128 \
    --bandwidth 3352 --paths fast,l1 --repeats $5 --out $R/bench-$1-$2 > $R/bench-$1-$2.log 2>&1
  echo "== $3 B=$4, layout $2: exit $?"; grep -E "ms/step" $R/bench-$1-$2.log | head -3; pack
  unset BATCHLAB_GQA_LAYOUT
}
bench 8b default llama-3.1-8b 256 2 150
bench 8b staged llama-3.1-8b 256 2 150
timeout 100 python3 -m batchlab matrix run --matrix matrices/cuda.toml --live \
  --filter "fast/*/B64/*" --jobs 4 --report $R/gate > $R/gate.log 2>&1
echo "== fast CUDA gate, 64 rows: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/gate.log; pack
bench 1b default llama-3.2-1b 64,256 2 100
bench 1b staged llama-3.2-1b 64,256 2 100
pack

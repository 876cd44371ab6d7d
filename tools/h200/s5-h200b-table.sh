# As run (h200b, 2026-12-02): on the warm machine after s5-h200b-gates.sh, with
# `echo 0 > /tmp/h200b-floor && echo 1 > /tmp/h200b-gqa` first (the fixed 64-row blocks,
# the GQA row kernel: what the probes and the solo gate supported; now the defaults).
# Issue 28, h200b session, call 4 of 4 (straight after s5-h200b-gates.sh, on the warm
# machine): the table with every path in one call, the invariant path with the
# floor and row kernel call 3 chose
# (/tmp/h200b-floor, /tmp/h200b-gqa).
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
export BATCHLAB_INVARIANT_ONE_GEMM=$(cat /tmp/h200b-floor 2>/dev/null || echo 0)
export BATCHLAB_ROW_ATTENTION_GQA=$(cat /tmp/h200b-gqa 2>/dev/null || echo 0)
R=$OUT/t; mkdir -p $R
echo "floor $BATCHLAB_INVARIANT_ONE_GEMM gqa $BATCHLAB_ROW_ATTENTION_GQA" | tee $R/floor.txt
pack() { tar czf $OUT/t.tgz -C $OUT t; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
timeout 270 python3 -m batchlab bench --model llama-3.2-1b --batch 1,64,256 --prompt-len 128 --gen-len 128 \
  --paths fast,l1,invariant,kv8,kv4 --repeats 3 --out $R/bench > $R/bench-1b.log 2>&1
grep -E "B=|failed|Error" $R/bench-1b.log; pack
timeout 290 python3 -m batchlab bench --model llama-3.1-8b --batch 1,256 --prompt-len 128 --gen-len 128 \
  --paths fast,l1,invariant,kv8,kv4 --repeats 3 --out $R/bench > $R/bench-8b.log 2>&1
grep -E "B=|failed|Error" $R/bench-8b.log; pack
ls $R/bench

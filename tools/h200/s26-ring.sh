# Issue 28 item 3, tenth round, call 1: the looped kernel's cp.async ring (each warp keeps
# R rows of K and V in flight in shared memory; grouped_decode_looped.ring_slots), the
# default in this tree. ~7 minutes:
# 1. tools/h200/gqa_exact_probe.py ring: the default and W = 8 / 16 at R = 0, 2, 4, 8
#    bit for bit against MLX on every probe shape (strided views too), then the timing
#    table (8B, 1B and qwen3-0.6b heads);
# 2. tools/h200/gqa_exact_probe.py fast: fast's tokens and logprob bytes with the kernel
#    (default: the ring) equal to without it, three models;
# 3. tools/h200/gqa_exact_probe.py flat: fast's flat decode forward (flat_decode.py, the
#    default in this tree) against the modules' forward, bytes equal, five shapes;
# 4. the bench at llama-3.1-8b B=256, fast and l1: the ring (default) against no ring
#    (BATCHLAB_GQA_RING=0, last round's default), in separate processes.
# Run as (after the bundle's install.sh, tools/h200/stage-bundle.sh): bash tools/h200/s26-ring.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
git log -1 --format=%h 2>/dev/null > $R/commit.txt
timeout 230 python3 tools/h200/gqa_exact_probe.py ring > $R/probe.log 2>&1
echo "== probe (ring): exit $?"; cat $R/probe.log; pack
timeout 100 python3 tools/h200/gqa_exact_probe.py fast > $R/fast.log 2>&1
echo "== probe (fast): exit $?"; cat $R/fast.log; pack
timeout 100 python3 tools/h200/gqa_exact_probe.py flat > $R/flat.log 2>&1
echo "== probe (flat): exit $?"; cat $R/flat.log; pack
bench() {  # tag, ring (default: unset), model, batches, repeats, timeout
  if [ $2 = default ]; then unset BATCHLAB_GQA_RING; else export BATCHLAB_GQA_RING=$2; fi
  timeout $6 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 --gen-len 128 \
    --bandwidth 3352 --paths fast,l1 --repeats $5 --out $R/bench-$1-ring$2 > $R/bench-$1-ring$2.log 2>&1
  echo "== $3 B=$4, ring $2: exit $?"; grep -E "ms/step" $R/bench-$1-ring$2.log | head -3; pack
  unset BATCHLAB_GQA_RING
}
bench 8b default llama-3.1-8b 256 2 120
bench 8b 0 llama-3.1-8b 256 2 120
pack

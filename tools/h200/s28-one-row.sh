# Issue 28, eleventh round, call 1 (after the seven staging calls): fast's one-row fused
# projections (q/k/v and gate/up as one product each at B=1; llama's q|k in one RoPE call).
# ~8 minutes, each step packs its output (a cut call keeps what ran):
# 1. gqa_exact_probe.py onerow: every token and logprob byte of fast with one-row fusion
#    against without (BATCHLAB_FAST_ONE_ROW=0), flat forward on and off; 'ONE ROW SAME yes'
#    is the bit gate of this round;
# 2. the bench at B=1, fast (generate_step and BatchGenerator in the same process),
#    llama-3.2-1b and qwen3-0.6b, fusion on and off, interleaved runs;
# 3. tools/h200/opcount.py llama-3.2-1b fast, fusion on and off.
# Run as (after the bundle's install.sh): bash tools/h200/s28-one-row.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
bench() {  # tag, env (k=v,k=v or -), model, batches, paths, repeats, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 python3 -m batchlab bench --model $3 --batch $4 --prompt-len 128 \
    --gen-len 128 --bandwidth 3352 --paths $5 --repeats $6 --out $R/bench-$1 > $R/bench-$1.log 2>&1
  echo "== $1 ($3 B=$4, $2): exit $?"; grep -E "ms/step" $R/bench-$1.log | head -2; pack
}
git log -1 --format=%H > $R/commit.txt 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
timeout 150 python3 tools/h200/gqa_exact_probe.py onerow > $R/onerow-probe.txt 2>&1
echo "== onerow probe: exit $?"; cat $R/onerow-probe.txt; pack
bench 1b-b1-one - llama-3.2-1b 1 fast 5 50
bench 1b-b1-one0 BATCHLAB_FAST_ONE_ROW=0 llama-3.2-1b 1 fast 5 50
bench q06-b1-one - qwen3-0.6b 1 fast 5 50
bench q06-b1-one0 BATCHLAB_FAST_ONE_ROW=0 qwen3-0.6b 1 fast 5 50
for f in 1 0; do
  BATCHLAB_FAST_ONE_ROW=$f timeout 40 python3 tools/h200/opcount.py llama-3.2-1b fast > $R/opcount-one$f.txt 2>&1
  echo "== opcount, one row $f: exit $?"; tail -1 $R/opcount-one$f.txt; pack
done
bench 1b-b1-one-again - llama-3.2-1b 1 fast 5 50
pack

# Issue 28, eleventh round, second machine: why one-row fusion lengthened qwen3-0.6b's
# B=1 step (s28c: 4.22-4.28 ms against 3.49-3.58 without) when it did not move llama's.
# ~4 minutes, each step packs its output:
# 1. Nsight Compute over one fast decode step at qwen3-0.6b B=1, fusion on and off
#    (step_kernels.py + ncu_summary.py), and the top kernels by name;
# 2. bench profile of fast at llama-3.2-1b and qwen3-0.6b B=1 (fusion off, the default
#    after s28c): forward build, submit and device wait of a step.
# Run as (after the bundle's install.sh): bash tools/h200/s28d-qwen3.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/q; mkdir -p $R
pack() { tar czf $OUT/q.tgz -C $OUT q; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
N="$NCU --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base"
for f in 1 0; do
  BATCHLAB_FAST_ONE_ROW=$f timeout 70 $N python3 tools/h200/step_kernels.py qwen3-0.6b 1 fast 64 \
    > $R/ncu-q06-b1-one$f.csv 2> $R/ncu-q06-b1-one$f.err
  echo "== ncu qwen3 B=1 one row $f: exit $?"; tail -2 $R/ncu-q06-b1-one$f.err
  python3 tools/h200/ncu_summary.py $R/ncu-q06-b1-one$f.csv "qwen3-0.6b B=1 fast one row $f" 2>&1 \
    | tee $R/ncu-q06-b1-one$f.txt; pack
done
for m in qwen3-0.6b llama-3.2-1b; do
  timeout 90 python3 -m batchlab bench profile --model $m --batch 1 --prompt-len 128 \
    --gen-len 128 --paths fast --repeats 1 --out $R/profile-$m > $R/profile-$m.log 2>&1
  echo "== bench profile $m: exit $?"; tail -12 $R/profile-$m.log; pack
done
pack

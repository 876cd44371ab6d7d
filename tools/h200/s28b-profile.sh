# Issue 28, eleventh round, call 2 (warm, after s28-one-row.sh): where the time goes.
# ~8 minutes, each step packs its output:
# 1. Nsight Compute over one fast decode step at llama-3.1-8b B=256 (192 keys), every kernel
#    serialized and timed alone (step_kernels.py + ncu_summary.py): item 3's breakdown with
#    this round's code; then l1's;
# 2. the same at llama-3.2-1b B=1, fast, one-row fusion on and off: the kernels' device time
#    against the step's host time (item 2: what is left if the host cost went away);
# 3. the bench at llama-3.1-8b B=1, fast, one-row fusion on and off.
# Run as: bash tools/h200/s28b-profile.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/p; mkdir -p $R
pack() { tar czf $OUT/p.tgz -C $OUT p; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
N="$NCU --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base"
ncu_step() {  # tag, env (k=v or -), model, B, path, warm, timeout
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout $7 $N python3 tools/h200/step_kernels.py $3 $4 $5 $6 > $R/ncu-$1.csv 2> $R/ncu-$1.err
  echo "== ncu $1: exit $?"; grep -v '^"' $R/ncu-$1.csv | tail -3; tail -3 $R/ncu-$1.err
  python3 tools/h200/ncu_summary.py $R/ncu-$1.csv "$3 B=$4 $5 $2" 2>&1 | tee $R/ncu-$1.txt; pack
}
ncu_step 8b-fast - llama-3.1-8b 256 fast 64 120
ncu_step 1b-b1-fast - llama-3.2-1b 1 fast 64 60
ncu_step 1b-b1-fast-one0 BATCHLAB_FAST_ONE_ROW=0 llama-3.2-1b 1 fast 64 60
ncu_step 8b-l1 - llama-3.1-8b 256 l1 64 120
for f in 1 0; do
  BATCHLAB_FAST_ONE_ROW=$f timeout 70 python3 -m batchlab bench --model llama-3.1-8b --batch 1 \
    --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths fast --repeats 3 \
    --out $R/bench-8b-b1-one$f > $R/bench-8b-b1-one$f.log 2>&1
  echo "== 8b B=1 one row $f: exit $?"; grep -E "ms/step" $R/bench-8b-b1-one$f.log | head -2; pack
done
pack

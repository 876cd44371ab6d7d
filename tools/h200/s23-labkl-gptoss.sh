# Issue 28 item 4 and the open gate finding, one call on the warm machine (~9 min):
# 1. the whole-corpus teacher-forced KL of the quantized-KV paths on the real model
#    (smollm2-135m, unpacked by the bundle's install.sh), under cProfile: the last try
#    spent 107 s before its first scored position, so the profile says where;
# 2. beside it (the KL does not depend on timing), the gpt-oss cell whose second judge
#    failed in s21b with TF32 off: twice with TF32 off (the CLI's default), once on.
# Run as: source .gpu-stage/bundle/qN/install.sh (tools/h200/stage-bundle.sh) && bash tools/h200/s23-labkl-gptoss.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/k; mkdir -p $R
pack() { tar czf $OUT/k.tgz -C $OUT k; }
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
CELL='invariant/gpt-oss/B65/needle/evict-many/ctx-wrap/seed1_cb48_ps16'
(
  for run in off1 off2 on; do
    tf=0; [ $run = on ] && tf=1
    MLX_ENABLE_TF32=$tf timeout 150 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml \
      --live --filter "$CELL" --report $R/gptoss-$run > $R/gptoss-$run.log 2>&1
    echo "== gpt-oss cell, TF32 $run: exit $?" >> $R/gptoss.txt
    grep -E "^(PASS|FAIL|ERROR)|solo|KL|cells passed" $R/gptoss-$run.log | cut -c1-220 >> $R/gptoss.txt
  done
) &
timeout -s INT 420 python3 -m cProfile -o $R/labkl.prof -m batchlab lab kl --model smollm2-135m \
  --paths kv8,kv4,kvmix,kv4h --reference l1 --rows 0 --length 512 --context 256 --batch 16 \
  --out $R/smollm2-135m-cuda-sm90 > $R/labkl.log 2>&1
echo "== lab kl: exit $?"; tail -14 $R/labkl.log
python3 -c "import pstats; pstats.Stats('$R/labkl.prof').sort_stats('cumulative').print_stats(25)" \
  > $R/labkl-profile.txt 2>&1; grep -E "lab/run|sensitivity|_sample|prefill|numpy.array" $R/labkl-profile.txt | head -12
pack; wait; cat $R/gptoss.txt; pack

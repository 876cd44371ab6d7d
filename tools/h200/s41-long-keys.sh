# Issue 28, fifteenth round, after the change that sends fast's unmasked decode calls from
# 256 keys to the grouped kernel (MLX's choice there, cuDNN, does not repeat itself: s40).
# Part a: the kernel against MLX with cuDNN off from 256 keys (gqa_exact_probe.py long:
# EXACT LONG yes up to 1023 keys) and its time against cuDNN's; then cuda-repeat.toml's
# real-head cells (--live --repeat) as they are, and broken on purpose with
# BATCHLAB_FAST_GQA=0 (fast on MLX's attention, so cuDNN's): those fast cells must fail.
# Part b: fast repeats itself at B=256 past 256 keys (gqa_exact_probe.py repeat), and the
# cost: batchlab bench at 384 prompt tokens (every decode step past 256 keys).
# Run as: bash tools/h200/s41-long-keys.sh a|b (after staging; bench-lib's environment)
set -u
R=$OUT/l TAG=l
source tools/h200/bench-lib.sh
gate() {  # tag, env
  env_args=$(echo $2 | tr ',' ' '); [ "$2" = - ] && env_args=
  env $env_args timeout 150 python3 -m batchlab matrix run --matrix matrices/cuda-repeat.toml \
    --live --repeat --filter '*ctx-past*' --jobs 4 --report $R/$1 > $R/$1.log 2>&1
  echo "== gate $1 ($2): exit $?"; grep -E "cells passed|^FAIL" $R/$1.log | head -20
  grep -ho '"detail": "[^"]\{0,160\}' $R/$1/results.jsonl | sort | uniq -c | head -6
  rm -f $R/$1/heatmap.png; pack
}
if [ "$1" = a ]; then
  probe long-nocudnn MLX_CUDA_USE_CUDNN_SDPA=0,MLX_CUDA_USE_CUDNN_SPDA=0 long 120
  grep -E "us|^llama|^qwen" $R/probe-long-nocudnn.log | tail -9
  probe long-cudnn - long 120
  grep -E "^llama|^qwen" $R/probe-long-cudnn.log | tail -7
  gate past -
  gate past-gqa0 BATCHLAB_FAST_GQA=0
else
  probe repeat - repeat 200
  for gqa in 1 0; do  # 0: fast on MLX's attention (cuDNN from 256 keys), as before
    BATCHLAB_FAST_GQA=$gqa timeout 150 python3 -m batchlab bench --model llama-3.2-1b \
      --batch 256 --prompt-len 384 --gen-len 64 --bandwidth 3352 --paths fast,l1 \
      --repeats 3 --out $R/bench-1b-gqa$gqa > $R/bench-1b-gqa$gqa.log 2>&1
    echo "== bench 1b B=256 384+64 GQA=$gqa: exit $?"; grep -E "ms/step" $R/bench-1b-gqa$gqa.log | head -4
    pack
  done
fi

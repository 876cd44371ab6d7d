# Issue 28, next round's first machine (prepared in the fourteenth round, not yet run):
# which engines repeat themselves at large B past 256 keys on CUDA. matrices/cuda-repeat.toml
# (llama-hd64, qwen3-hd128; l1 and fast; B 64 and 256; the 256-key growth step) with
# --live --repeat on batchlab and on mlx-lm's BatchGenerator, then gqa_exact_probe.py
# repeat (fast, B=256, 300 steps). 32/32 cells passed on the CPU in 393 s.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s39-repeat-gate.sh
set -u
R=$OUT/k TAG=k
source tools/h200/bench-lib.sh
for engine in batchlab mlx-lm; do
  timeout 250 python3 -m batchlab matrix run --matrix matrices/cuda-repeat.toml --live \
    --repeat --engine $engine --jobs 4 --report $R/repeat-$engine > $R/repeat-$engine.log 2>&1
  echo "== repeat $engine: exit $?"; grep -E "cells passed|not repeatable" $R/repeat-$engine.log | head -8; pack
done
probe repeat - repeat 170

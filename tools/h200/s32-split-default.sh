# Issue 28, thirteenth round, second machine: the split sums on by default, and the
# register path's rows addressed by 32-bit offsets (vec32) with the row after each found
# once. ~8 minutes, each step packs its output:
# 1. gqa_exact_probe.py split: time a call, then the bits against MLX on every shape;
# 2. gqa_exact_probe.py fast: fast's tokens and logprob bytes with the kernel (now split,
#    vec32) against MLX's attention (FAST SAME);
# 3. looped_step_ab.py: the 8B and 1B B=256 step, split against MLX's sums, one process.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s32-split-default.sh
set -u
R=$OUT/d TAG=d
source tools/h200/bench-lib.sh
git rev-parse HEAD > $R/commit.txt 2>/dev/null
probe split - split 300
probe fast - fast 120
timeout 150 python3 tools/h200/looped_step_ab.py --model llama-3.1-8b --batch 256 --rounds 4 \
  --variants mlx-sums,split > $R/ab-8b.log 2>&1
echo "== ab 8b: exit $?"; tail -2 $R/ab-8b.log; pack

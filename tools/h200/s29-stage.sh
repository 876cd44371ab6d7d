# Issue 28, twelfth round, call 1 (after the bundle's first part): the looped kernel
# staging every row of a block in shared memory before computing (template S).
# ~8 minutes, each step packs its output:
# 1. gqa_exact_probe.py stage: the time a call (default, ring, S at W = 8, 16, 32, MLX)
#    at the bench's heads, then the bits against MLX on every shape (strided views too);
# 2. gqa_exact_probe.py fast with BATCHLAB_GQA_STAGE=1: fast's tokens and logprob bytes
#    with the staged kernel against MLX's attention (FAST SAME).
# Run as: source .gpu-stage/bundle/q2/install.sh && bash tools/h200/s29-stage.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/s; mkdir -p $R
pack() { tar czf $OUT/s.tgz -C $OUT s; }
git rev-parse HEAD > $R/commit.txt 2>/dev/null
timeout 360 python3 tools/h200/gqa_exact_probe.py stage > $R/probe-stage.log 2>&1
echo "== probe stage: exit $?"; grep -vE "^(llama|qwen|d96|d64|f16|f32)" $R/probe-stage.log | tail -3
cat $R/probe-stage.log | head -12; grep -E "EXACT|DIFFER|comparisons" $R/probe-stage.log; pack
BATCHLAB_GQA_STAGE=1 timeout 150 python3 tools/h200/gqa_exact_probe.py fast > $R/probe-fast-stage.log 2>&1
echo "== probe fast, stage on: exit $?"; tail -4 $R/probe-fast-stage.log; pack

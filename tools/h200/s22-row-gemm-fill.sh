# Issue 28 item 1, for the next session (NOT RUN: this session's device time was spent):
# BATCHLAB_ROW_GEMM_FILL=1 (engine/kernels/row_gemm.py: the tiled kernel's classes on
# separate blocks under two waves, 32-row tiles at 17-64 rows; Nsight Compute timed both
# at 0.35-0.6x the defaults' device time on llama-3.2-1b's small-N projections).
# 1. the invariant CUDA gate's B33/B64/B65/B129 cells with it (the solo gate mixes the
#    default and the filled shapes: a row at B=1 takes the split kernel);
# 2. the bench, invariant against l1 with it off and on: llama-3.2-1b B 1, 64, 256 and
#    llama-3.1-8b B 256.
# ~9 minutes on the warm machine. B=1 is left out: FILL changes no shape below 17 rows.
# Run as (after the bundle's install.sh, tools/h200/stage-bundle.sh): bash tools/h200/s22-row-gemm-fill.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/f; mkdir -p $R
pack() { tar czf $OUT/f.tgz -C $OUT f; }
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
BATCHLAB_ROW_GEMM_FILL=1 timeout 170 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml \
  --live --filter "/B33/,/B64/,/B65/,/B129/" --jobs 15 --report $R/gate > $R/gate.log 2>&1
echo "== gate, fill on: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/gate.log; pack
for on in 0 1; do
  BATCHLAB_ROW_GEMM_FILL=$on timeout 110 python3 -m batchlab bench --model llama-3.2-1b \
    --batch 64,256 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
    --repeats 3 --out $R/bench-1b-$on > $R/bench-1b-$on.log 2>&1
  echo "== 1B, fill $on: exit $?"; grep -E "ms/step" $R/bench-1b-$on.log | head -4; pack
  BATCHLAB_ROW_GEMM_FILL=$on timeout 100 python3 -m batchlab bench --model llama-3.1-8b \
    --batch 256 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
    --repeats 2 --out $R/bench-8b-$on > $R/bench-8b-$on.log 2>&1
  echo "== 8B, fill $on: exit $?"; grep -E "ms/step" $R/bench-8b-$on.log | head -3; pack
done

# Issue 28 item 1, lead's call after h200e: the invariant path with a fixed 256-row GEMM
# block (BATCHLAB_INVARIANT_ROW_BLOCK=256: one GEMM per projection at every B <= 256)
# under its CUDA gate (invariant-cuda.toml's B33 cells less the real model, --live: solo
# gate + second judge), then its decode against l1 in the same bench run.
# Run after the two staging calls: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s11-invariant-block256.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
export BATCHLAB_INVARIANT_ROW_BLOCK=256
R=$OUT/s11; mkdir -p $R
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
timeout 110 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live \
  --filter "/B33/" --jobs 14 --report $R/gate-B33 > $R/gate-B33.log 2>&1
echo "== gate B33 (row block 256): exit $?"; grep -E "^(FAIL|ERROR)|cells passed" $R/gate-B33.log | tail -12
timeout 100 python3 -m batchlab bench --model llama-3.2-1b --batch 1,256 --prompt-len 128 \
  --gen-len 128 --paths l1,invariant --repeats 2 --out $R/bench-1b > $R/bench-1b.log 2>&1
echo "== bench 1b (row block 256): exit $?"; grep -E "B=|failed" $R/bench-1b.log

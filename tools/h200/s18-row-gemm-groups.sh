# Issue 28 item 1, for the next session (NOT RUN: this session's device time was spent):
# the grouped row GEMM (BATCHLAB_ROW_GEMM_GROUPS=1: q/k/v and gate/up in one call each),
# which should cut the invariant path's B=1 forward build (2.65 ms against l1's 1.53 in
# s17b: 129 custom-kernel calls a step, MLX rebuilding each one's source per call).
# 1. the probe: grouped == single products on 1B/8B shapes (and the rest of QUICK);
# 2. the B33 gate with groups on; 3. the 1B bench, groups off and on (l1 in each run);
# 4. the B=1 profile with groups on. ~8 minutes after the staging calls.
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s18-row-gemm-groups.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/g; mkdir -p $R
pack() { tar czf $OUT/g.tgz -C $OUT g; }
QUICK=1 timeout 120 python3 tools/h200/row_gemm_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; grep -E "INVARIANT|ACCURATE|differ|FAR|grouped|^K=" $R/probe.txt | cut -c1-200; pack
grep -q "^ROW GEMM INVARIANT yes" $R/probe.txt || { echo "rows differ: stop"; exit 3; }
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
BATCHLAB_ROW_GEMM_GROUPS=1 timeout 130 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml \
  --live --filter "/B33/" --jobs 15 --report $R/B33 > $R/B33.log 2>&1
echo "== B33, groups on: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall time" $R/B33.log; pack
for on in 0 1; do
  BATCHLAB_ROW_GEMM_GROUPS=$on timeout 150 python3 -m batchlab bench --model llama-3.2-1b \
    --batch 1,8,64,256 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
    --repeats 2 --out $R/bench-$on > $R/bench-$on.log 2>&1
  echo "== bench, groups $on: exit $?"; grep -E "^\| [0-9]+ \|" $R/bench-$on/llama-3.2-1b.md; pack
done
BATCHLAB_ROW_GEMM_GROUPS=1 timeout 100 python3 -m batchlab bench profile --model llama-3.2-1b \
  --batch 1 --prompt-len 128 --gen-len 64 --paths l1,invariant --out $R/profile > $R/profile.log 2>&1
echo "== profile: exit $?"; grep -E "^\| 1 \|" $R/profile/profile/*.md; pack

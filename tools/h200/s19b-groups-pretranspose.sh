# Issue 28 items 1 and 2, session 2026-12-02b, call 5 (warm, after s19): the two host-side
# opt-ins at B=1, each against l1 / generate_step in the same run:
# 1. BATCHLAB_ROW_GEMM_GROUPS=1 (q/k/v and gate/up one row-GEMM call each): invariant at B=1
#    and 256 on llama-3.2-1b, groups off and on, then the B=1 profile with groups on;
# 2. BATCHLAB_FAST_PRETRANSPOSE=1 (W.T made once): its probe (PRETRANSPOSE SAME), then
#    fast at B=1 on llama-3.2-1b and qwen3-0.6b, off and on.
# Run as: bash tools/h200/s19b-groups-pretranspose.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
for on in 0 1; do
  BATCHLAB_ROW_GEMM_GROUPS=$on timeout 110 python3 -m batchlab bench --model llama-3.2-1b \
    --batch 1,256 --prompt-len 128 --gen-len 128 --bandwidth 3352 --paths l1,invariant \
    --repeats 3 --out $R/groups-$on > $R/groups-$on.log 2>&1
  echo "== invariant bench, groups $on: exit $?"; grep -E "^\| [0-9]+ \|" $R/groups-$on/llama-3.2-1b.md | cut -d'|' -f1-5,15-17; pack
done
BATCHLAB_ROW_GEMM_GROUPS=1 timeout 60 python3 -m batchlab bench profile --model llama-3.2-1b \
  --batch 1 --prompt-len 128 --gen-len 64 --paths l1,invariant --out $R/profile > $R/profile.log 2>&1
echo "== profile: exit $?"; grep -E "^\| 1 \|" $R/profile/profile/*.md; pack
timeout 90 python3 tools/h200/pretranspose_probe.py > $R/pt-probe.txt 2>&1
echo "== pretranspose probe: exit $?"; tail -4 $R/pt-probe.txt; pack
for on in 0 1; do
  BATCHLAB_FAST_PRETRANSPOSE=$on timeout 90 python3 -m batchlab bench --model llama-3.2-1b,qwen3-0.6b \
    --batch 1 --prompt-len 128 --gen-len 128 --paths fast --repeats 3 --out $R/pt-$on > $R/pt-$on.log 2>&1
  echo "== fast B=1, pretranspose $on: exit $?"; grep -E "B=1" $R/pt-$on.log; pack
done

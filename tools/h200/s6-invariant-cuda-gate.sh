# The invariant path's gate at B 33-129 on the H200 (matrices/invariant-cuda.toml less the
# real model, whose GGUF the machine cannot fetch), with the GQA row kernel on (the CUDA
# default since h200b). --live: the second judge gets mlx-lm's batch bits made here, since
# goldens/cuda-sm90 keeps none with logprobs for these cells. Run after the staging calls.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/gate; mkdir -p $R
sed '/^# the real model/,$d' matrices/invariant-cuda.toml > /tmp/inv-cuda.toml
for part in "B65 140" "B129 170"; do set -- $part
  timeout $2 python3 -m batchlab matrix run --matrix /tmp/inv-cuda.toml --live \
    --filter "/$1/" --jobs ${JOBS:-12} --report $R/$1 > $R/$1.log 2>&1
  echo "$1: exit $?"; grep -E "^(FAIL|ERROR)|cells passed|wall" $R/$1.log | tail -12
done
python3 - <<'PY'
import json, collections, os
rows = []
for part in ("B65", "B129"):
    p = os.environ["OUT"] + f"/gate/{part}/results.jsonl"
    rows += [json.loads(l) for l in open(p)] if os.path.exists(p) else []
print(len(rows), "cells finished", dict(collections.Counter(r["status"] for r in rows)))
for r in rows:
    print(r["status"], r["cell_id"] if "cell_id" in r else r.get("id"), "|", r["detail"][:160])
PY

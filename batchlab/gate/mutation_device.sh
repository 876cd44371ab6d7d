#!/bin/bash
# The whole mutation campaign in one call on the H200 box used as a 16-core CPU machine
# (docs/mutation.md). Run from the repository root with .mutcamp carried:
#   tree.tgz (the clean project), mutants.tgz (mutmut's trampolined batchlab/engine),
#   zoo.tgz (the built zoo minus the real model), plan.json (the sample), whl/ (mlx,
#   mlx-cpu, mlx-lm). Phases: 1. the map (12 shards of the default matrix under per-cell
#   line coverage, 4 shards of the unit tests under per-test coverage, side by side);
#   2. the mutants, 15 at a time, until END seconds after the start; results stream to
#   $OUT/results.jsonl.
# Round 3 options: MAPFILE (a map.json.gz made elsewhere, e.g. on the shared machine with
# the same tree: the map phase is skipped), C (the carried folder, .mutcamp by default),
# UNITFILES (the unit killers, a space-separated list of paths), PLAN2 + END2 (a second
# plan run after the first until END2 seconds, results in $OUT/extra.jsonl; its own CAP2).
set -u
T0=$(date +%s)
C=$PWD/${C:-.mutcamp}
OUT=${OUT:-/tmp/mutout}
END=${END:-330}
SHARDS=${SHARDS:-13}
mkdir -p $OUT
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
if [ -z "${TRIAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target ${SITE:-/tmp/site} $C/whl/*.whl || exit 1
fi
W=${W:-/tmp/w}; M=${M:-/tmp/m}; CACHE=${CACHE:-/tmp/cache}; D=${D:-/tmp/mapdir}
rm -rf $W $M $D && mkdir -p $W $M $CACHE $D
tar xzf $C/tree.tgz -C $W && tar xzf $C/tree.tgz -C $M && tar xzf $C/mutants.tgz -C $M
# the default matrix less the real model's sweeps: its GGUF does not travel (98 MB)
cp $C/mutation-default.toml $W/matrices/ && cp $C/mutation-default.toml $M/matrices/
MATRIX=matrices/mutation-default.toml
[ -z "${TRIAL:-}" ] && tar xzf $C/zoo.tgz -C $CACHE && export BATCHLAB_CACHE=$CACHE
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
log "unpacked; $(nproc) cores; $(PYTHONPATH=${SITE:-/tmp/site} python3 -c 'import mlx.core as mx, mlx_lm; print(mx.__version__, mx.default_device(), mlx_lm.__version__)' 2>&1 | tail -1)"
# a warm machine may hold another session's MLX (CUDA) in /tmp/site: the goldens are the CPU's
PYTHONPATH=${SITE:-/tmp/site} python3 -c 'import mlx.core as mx; assert mx.default_device() == mx.cpu, mx.default_device()' || { log "not MLX's CPU backend: set SITE to a fresh folder"; exit 1; }
cd $W && export PYTHONPATH=$W:${SITE:-/tmp/site}
if [ -n "${MAPFILE:-}" ]; then
  gunzip -c $C/$MAPFILE > $D/map.json
  log "map: $MAPFILE (made elsewhere; map phase skipped)"
else
for i in $(seq 0 $((SHARDS - 1))); do
  timeout ${MAPKILL:-120} python3 -c 'from batchlab.gate.mutation_map import main; main()' --seconds ${MAPSEC:-80} \
    --matrix $MATRIX --goldens goldens --shard $i/$SHARDS \
    --skip-model smollm2-135m ${FIRST:+--first $FIRST} --out $D/map.$i.json > $D/map.$i.log 2>&1 &
done
UNIT=("tests/unit/test_engine_caches.py tests/unit/test_scheduler_cache.py tests/unit/test_engine_run_values.py"
      "tests/unit/test_invariant.py tests/unit/test_quantized_kv.py tests/unit/test_engine_kv_growth.py"
      "tests/unit/test_history.py tests/unit/test_engine_schedule_limits.py tests/unit/test_sampler.py tests/unit/test_compiled_path.py")
printf '[run]\nsigterm = true\n' > $D/cov.rc  # a shard cut by timeout still saves its data
[ -n "${TRIAL:-}" ] && UNIT=("tests/unit/test_scheduler_cache.py")
for j in "${!UNIT[@]}"; do
  MUTATION_UNIT_PASSED=$D/passed timeout ${UNITSEC:-90} python3 -m coverage run --rcfile=$D/cov.rc --data-file=$D/unit.$j --source=batchlab/engine -m pytest ${UNIT[$j]} \
    -p batchlab.gate.unit_contexts -p no:randomly -p no:cacheprovider -n 0 -q --continue-on-collection-errors > $D/unit.$j.log 2>&1 &
done
wait
log "map shards done: $(ls $D/map.*.json 2>/dev/null | wc -l) cell shards, $(ls $D/unit.? 2>/dev/null | wc -l) unit shards"
for j in "${!UNIT[@]}"; do tail -2 $D/unit.$j.log | sed "s/^/unit.$j: /" | tee -a $OUT/log.txt; done
for f in $D/map.*.log; do tail -2 $f | sed "s#^#$(basename $f): #"; done | grep -v "^$" | tail -40 >> $OUT/log.txt
python3 -c 'from batchlab.gate.mutation_map import main; main()' --merge $D/map.*.json \
  --unit-coverage $D/unit.0 $D/unit.1 $D/unit.2 --unit-passed $D/passed --out $D/map.json
gzip -c $D/map.json > $OUT/map.json.gz
fi
python3 -c "
import json, collections; m = json.load(open('$D/map.json'))
print('cells', len(m['cells']), dict(collections.Counter(c['status'] for c in m['cells'].values())),
      'unmapped', len(m['unmapped']), 'cell-seconds', round(sum(c['seconds'] for c in m['cells'].values()), 1), 'unit files', len(m.get('unit', {})))
" 2>&1 | tee -a $OUT/log.txt
cd $M && export PYTHONPATH=$M:${SITE:-/tmp/site}
LEFT=$(( END - ($(date +%s) - T0) ))
UNITARGS="--unit tests/unit/"
[ -n "${UNITFILES:-}" ] && UNITARGS=$(printf -- '--unit %s ' $UNITFILES)
log "mutants: $LEFT s"
python3 -c 'from batchlab.gate.mutation_run import main; main()' --plan $C/${PLAN:-plan.json} --map $D/map.json --matrix $MATRIX \
  --jobs ${JOBS:-15} --cap ${CAP:-20} --unit-cap ${UNITCAP:-40} $UNITARGS --seconds $LEFT --out $OUT/results.jsonl 2>&1 | tail -20 | tee -a $OUT/log.txt
log "done: $(wc -l < $OUT/results.jsonl) results; $(python3 -c "
import json, collections; print(dict(collections.Counter((r['kind'], r['status']) for r in map(json.loads, open('$OUT/results.jsonl')))))")"
if [ -n "${PLAN2:-}" ]; then
  LEFT=$(( ${END2:-$END} - ($(date +%s) - T0) ))
  log "second plan $PLAN2: $LEFT s"
  python3 -c 'from batchlab.gate.mutation_run import main; main()' --plan $C/$PLAN2 --map $D/map.json --matrix $MATRIX \
    --jobs ${JOBS:-15} --cap ${CAP2:-${CAP:-20}} --unit-cap ${UNITCAP:-40} --seconds $LEFT --out $OUT/extra.jsonl 2>&1 | tail -5 | tee -a $OUT/log.txt
  log "done: $(wc -l < $OUT/extra.jsonl) extra results"
fi

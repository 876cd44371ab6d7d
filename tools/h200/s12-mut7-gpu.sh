# Issue 26 item 6, round 7 (docs/mutation.md): the default matrix's own cells as the
# killers of the 38 GPU-class mutants, on the H200 with --live (gate/mutation_cuda.py):
# a clean map of the default cells that can reach GPU code (every invariant and
# invariant-blocked cell, kv4h (judged by its solo runs), two kv cells (their serial
# quantized oracle on CUDA), l1 on a ring (gemma3 join-evict) and unpadded SSM batches
# (qwen3.5, mamba2 equal rows), llama-mha; not the MLA models (CUDA refuses them) nor
# rwkv7 (ORACLE-BUG); trimmed to fit the device minutes left after a failed start), then each mutant in a fresh interpreter
# against the cells that called its function and PASSed clean, fail-fast.
# Carried: .gpu-stage/mut7 (tree.tgz: the branch's batchlab/ matrices/ pyproject.toml;
# mutants.tgz: mutmut's trampolined copies of the 7 files; cuda-names.txt: the 38
# GPU-class mutants and the two int64 row-int uploads the CPU cells leave capped).
# Run after the three staging calls:
#   source .gpu-stage/h200f/q4/install.sh && bash .gpu-stage/mut7/s12-mut7-gpu.sh
# MAPFILE=cuda-map.jsonl: a clean CUDA map made by an earlier call (carried): no map
# phase, the mutants only (EXPRESS's cells, their zoo models built as with a map).
# Local trial (MLX's CPU, no staging): TRIAL=1 PY=.venv/bin/python S=... OUT=... bash ...
set -u
T0=$(date +%s)
S=${S:-$PWD/.gpu-stage/mut7}; W=${W:-/tmp/m7}; PY=${PY:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 BATCHLAB_CACHE=${BATCHLAB_CACHE:-/tmp/blc}
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
rm -rf $W && mkdir -p $W $BATCHLAB_CACHE
tar xzf $S/tree.tgz -C $W && tar xzf $S/mutants.tgz -C $W || { log "unpack failed"; exit 1; }
cd $W && export PYTHONPATH=${SITE:-/tmp/site}:$W
log "unpacked: $($PY -c 'import mlx.core as mx, mlx_lm; print(mx.__version__, mx.default_device(), mlx_lm.__version__)' 2>&1 | tail -1); $(grep -l mutmut_orig -r batchlab/engine | wc -l) mutated files"
[ -z "${TRIAL:-}" ] && { $PY -c 'import mlx.core as mx; assert mx.default_device() == mx.gpu' || { log "not MLX's GPU"; exit 1; }; }
FILTER=${FILTER:-"invariant/,invariant-blocked/,kv4h/llama-hd64,kv8/llama-hd64/B4/ragged/join-evict/ctx-wrap,kv4-s8/llama-hd64/B1/equal/static/ctx-short,l1/gemma3/B3/ragged/join-evict/ctx-wrap,l1/qwen3.5/B3/equal/static/ctx-short,l1/mamba2/B3/equal/static/ctx-short,l1/llama-mha/"}
# EXPRESS=1: 14 cells (one a map shard: the invariant paths on llama, gemma3, qwen3.5,
# gemma4-e4b, llama-mha; l1 on a ring and an unpadded SSM batch; one kv cell) and short
# phases, for a call that must fit in about two minutes
if [ -n "${EXPRESS:-}" ]; then
  FILTER="invariant-blocked/llama/B12/needle/join-evict/ctx-short/steps6,invariant-blocked/gemma3/B12/needle/join-evict/ctx-short/steps6,invariant-blocked/qwen3.5/B12/needle/join-evict/ctx-short/steps6,invariant-blocked/gemma4-e4b/B12/needle/join-evict/ctx-short/steps6,invariant/llama/B8/needle/join-evict/ctx-short,invariant/gemma3/B8/needle/join-evict/ctx-short,invariant/qwen3.5/B8/needle/join-evict/ctx-short,invariant/llama-mha/,invariant-blocked/llama-mha/,invariant/gemma4-e4b/,l1/gemma3/B3/ragged/join-evict/ctx-wrap,l1/qwen3.5/B3/equal/static/ctx-short,kv8/llama-hd64/B4/ragged/join-evict/ctx-wrap,invariant-blocked/llama/B8/ragged/static/ctx-short/steps6"
  MAPSEC=${MAPSEC:-5} MUTSEC=${MUTSEC:-50} CAP=${CAP:-15} LIMIT=${LIMIT:-110} PARALLEL=${PARALLEL:-16}
fi
SKIP="--skip-model deepseek-v3 --skip-model kimi-linear --skip-model rwkv7"  # CUDA refuses MLA; rwkv7 is ORACLE-BUG
# the zoo models those cells use, built once, side by side (14 map shards would race)
MATRIX=${MATRIX:-$S/mutation-default.toml}  # the default matrix less the real model (no network there)
MODELS=$($PY -c "
from pathlib import Path
from batchlab.gate.mutation_shim import install; install(force=True)
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
print(' '.join(sorted({c.model for c in select(load_matrix(Path('$MATRIX')), '''$FILTER''', None)} - set('''$SKIP'''.split()))))")
log "models: $MODELS"
for m in $MODELS; do timeout 90 $PY -m batchlab zoo build $m > /dev/null 2>&1 & done; wait
log "zoo built: $(ls $BATCHLAB_CACHE/zoo | wc -l) models"
timeout ${LIMIT:-140} $PY -m batchlab.gate.mutation_cuda --names ${NAMES:-$S/cuda-names.txt} \
  --matrix $MATRIX --filter "$FILTER" $SKIP --live --shards ${SHARDS:-14} \
  --parallel ${PARALLEL:-14} --map-seconds ${MAPSEC:-30} --seconds ${MUTSEC:-55} \
  --cap ${CAP:-20} ${MAPFILE:+--map-file $S/$MAPFILE} --work /tmp/m7w --out $OUT 2>&1 | grep -v transformers | tee -a $OUT/log.txt
log "done: exit ${PIPESTATUS[0]}; $(wc -l < $OUT/map.jsonl) map lines, $(wc -l < $OUT/mutants.jsonl) mutant lines"
tail -n 3 /tmp/m7w/map.0.log /tmp/m7w/m.0.log 2>/dev/null | grep -v transformers | tail -8

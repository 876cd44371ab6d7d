# Round 4's CUDA phase (docs/mutation.md): the GPU-class survivors of round 3 against
# tools/h200/mutation-gpu.toml with --live, one fresh matrix run per mutant
# (batchlab/gate/mutation_gpu.py). Run after the CUDA wheel's staging calls, with
# .gpu-stage/mut4 carried (mutants.tgz, gpu-names.txt; tree.tgz where the checkout is another tree).
export PYTHONUNBUFFERED=1 BATCHLAB_CACHE=/tmp/blc
S=$PWD/${S:-.gpu-stage/mut4} M=/tmp/mgpu-tree
rm -rf $M && mkdir -p $M
# the project: the carried tree.tgz, else this checkout itself (it is the tree the mutants came from)
if [ -f $S/tree.tgz ]; then tar xzf $S/tree.tgz -C $M; else tar --exclude=./.gpu-stage --exclude=./.git -cf - . | tar -xf - -C $M; fi
tar xzf $S/mutants.tgz -C $M
cp tools/h200/mutation-gpu.toml $M/
cd $M && timeout ${LIMIT:-420} python3 -m batchlab.gate.mutation_gpu --mutants $M \
  --names $S/gpu-names.txt --matrix mutation-gpu.toml --live --jobs ${JOBS:-2} \
  --parallel ${PARALLEL:-8} --timeout ${MUTANT_TIMEOUT:-150} --out $OUT/gpu-results.jsonl \
  --work /tmp/mgpuw
echo "exit $?; $(wc -l < $OUT/gpu-results.jsonl) mutants judged"
cp -r /tmp/mgpuw/clean $OUT/clean-report 2>/dev/null

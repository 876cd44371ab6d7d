# Issue 28, h200e, second session, call 3 (after the two staging calls): the grouped
# kernel's staged layout (grouped_decode_staged.py, the default where the group allows it)
# against MLX bit for bit beside the first layout, fast with and without it, the real
# head-dim models' fast cells of the CUDA gate, and the 8B B=256 bench.
# Run as: source .gpu-stage/h200b/p3/install.sh && bash .gpu-stage/h200e/s10c-h200e-staged.sh
set -u
T=/tmp/h200e-tree
rm -rf $T && mkdir -p $T && tar cf - --exclude=./.gpu-stage . | tar xf - -C $T
tar xzf .gpu-stage/h200e/h200e.tgz -C $T && cd $T || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/s; mkdir -p $R
pack() { tar czf $OUT/s.tgz -C $OUT s; }
timeout 120 python3 tools/h200/gqa_exact_probe.py kernel > $R/probe-kernel.txt 2>&1
echo "== probe kernel: exit $?"; grep -E "DIFFER|EXACT|comparisons|  [0-9]+ +[0-9]+ " $R/probe-kernel.txt; pack
grep -q "^EXACT OK yes" $R/probe-kernel.txt || { echo "staged not exact: stop"; tail -5 $R/probe-kernel.txt; exit 3; }
timeout 100 python3 tools/h200/gqa_exact_probe.py fast > $R/probe-fast.txt 2>&1
echo "== probe fast: exit $?"; tail -4 $R/probe-fast.txt; pack
timeout 60 python3 -m batchlab matrix run --matrix matrices/cuda.toml --live --jobs 6 \
  --filter 'fast/llama-hd64/*,fast/qwen3-hd128/*' --report $R/gate-hd > $R/gate-hd.log 2>&1
echo "== gate (real head dims): exit $?"; tail -2 $R/gate-hd.log; pack
timeout 110 python3 -m batchlab bench --prompt-len 128 --gen-len 128 --bandwidth 3352 \
  --model llama-3.1-8b --batch 256 --paths fast,l1 --repeats 2 --out $R/8b-256 > $R/8b-256.log 2>&1
echo "== 8b-256: exit $?"; grep -E "B=" $R/8b-256.log; pack

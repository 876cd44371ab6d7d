# Issue 28 item 2, tenth round, call 2 (right after s26-ring.sh, same machine; s26 checked
# its bits): fast's decode
# forward on flat hidden states (engine/paths/flat_decode.py, the default in this tree)
# against the modules' forward (BATCHLAB_FAST_FLAT=0), at B=1 where the step is bound by
# the host:
# 1. tools/h200/opcount.py: the ops of one decode submit, both ways, llama-3.2-1b;
# 2. the bench at B=1, fast (with generate_step and BatchGenerator in the same process),
#    llama-3.2-1b and qwen3-0.6b, flat against the modules' forward in separate runs.
# Run as: bash tools/h200/s26c-flat-b1.sh (the bundle installed by the calls before)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/h; mkdir -p $R
pack() { tar czf $OUT/h.tgz -C $OUT h; }
for f in 1 0; do
  BATCHLAB_FAST_FLAT=$f timeout 90 python3 tools/h200/opcount.py llama-3.2-1b fast > $R/opcount-flat$f.txt 2>&1
  echo "== opcount, flat $f: exit $?"; tail -2 $R/opcount-flat$f.txt; pack
done
bench() {  # model, flat (1 or 0), repeats, timeout
  tag=$(echo $1 | tr -d .)-flat$2
  BATCHLAB_FAST_FLAT=$2 timeout $4 python3 -m batchlab bench --model $1 --batch 1 --prompt-len 128 \
    --gen-len 128 --bandwidth 3352 --paths fast --repeats $3 --out $R/bench-$tag > $R/bench-$tag.log 2>&1
  echo "== $1 B=1, flat $2: exit $?"; grep -E "ms/step|generate_step" $R/bench-$tag.log | head -4; pack
}
bench llama-3.2-1b 1 5 80
bench llama-3.2-1b 0 5 80
bench qwen3-0.6b 1 5 80
bench qwen3-0.6b 0 5 80
bench llama-3.2-1b 1 5 80
pack

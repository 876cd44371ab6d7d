# Issue 28, thirteenth round, call 3 (warm, after s31b-split-bench.sh): the broken-on-
# purpose check of the split sums, redone (s31's ran the repo's own copy: python -
# puts the working directory first on sys.path), then the paired step A/B of the
# looped variants in one process (looped_step_ab.py). ~7 minutes.
# Run as: bash tools/h200/s31c-ab.sh
set -u
R=$OUT/c TAG=c
source tools/h200/bench-lib.sh
B=/tmp/broken; rm -rf $B; mkdir -p $B; cp -r batchlab $B/
sed -i 's|for (int off = 16 >> LG; off > 0; off >>= 1) {|for (int off = 1; off <= (16 >> LG); off <<= 1) {|' \
  $B/batchlab/engine/kernels/grouped_decode_looped.py
# and its own kernel names: MLX may cache a kernel's compiled code by name
sed -i 's|batchlab_grouped_decode_looped_w|batchlab_broken_looped_w|' $B/batchlab/engine/kernels/grouped_decode.py
grep -c "off <= (16 >> LG)" $B/batchlab/engine/kernels/grouped_decode_looped.py > $R/broken.log
(cd $B && PYTHONPATH=/tmp/site:$B timeout 90 python3 - >> $R/broken.log 2>&1) <<'PY'
import mlx.core as mx
from batchlab.engine.kernels import grouped_decode as gd
print("from", gd.__file__)
mx.random.seed(0)
for hq, hkv, dim, b, keys in ((32, 8, 128, 64, 192), (32, 8, 64, 64, 100), (16, 8, 128, 5, 33)):
    q = mx.random.normal((b, hq, 1, dim)).astype(mx.bfloat16)
    k = mx.random.normal((b, hkv, keys, dim)).astype(mx.bfloat16)
    v = mx.random.normal((b, hkv, keys, dim)).astype(mx.bfloat16)
    mlx = mx.fast.scaled_dot_product_attention(q, k, v, scale=dim ** -0.5, mask=None)
    for split in (False, True):
        ours = gd.grouped_decode_attention(q, k, v, dim ** -0.5, "looped", 8, split=split)
        print(f"broken split G={hq // hkv} D={dim} B={b} keys={keys} split={split}:",
              "SAME" if mx.array_equal(ours, mlx).item() else "DIFFER")
PY
echo "== broken on purpose: exit $?"; cat $R/broken.log; pack
timeout 330 python3 tools/h200/looped_step_ab.py --model llama-3.1-8b --batch 256 --rounds 4 \
  --variants mlx-sums,split,split+ring4,ring4 > $R/ab-8b.log 2>&1
echo "== ab 8b: exit $?"; cat $R/ab-8b.log; pack
timeout 150 python3 tools/h200/looped_step_ab.py --model llama-3.2-1b --batch 256 --rounds 4 \
  --variants mlx-sums,split,split+ring4 > $R/ab-1b.log 2>&1
echo "== ab 1b: exit $?"; tail -3 $R/ab-1b.log; pack

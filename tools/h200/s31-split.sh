# Issue 28, thirteenth round, call 1 (after the bundle's first parts): the looped kernel
# with the heads' score sums split over the lanes (template H, BATCHLAB_GQA_SPLIT).
# ~8 minutes, each step packs its output:
# 1. gqa_exact_probe.py split: the time a call (MLX's sums against split ones, with and
#    without the ring, staged) at the bench's heads, then the bits against MLX on every
#    shape (strided views too);
# 2. gqa_exact_probe.py fast with BATCHLAB_GQA_SPLIT=1: fast's tokens and logprob bytes
#    with the split kernel against MLX's attention (FAST SAME);
# 3. broken on purpose: the split kernel's remaining butterfly levels in ascending order
#    (the same sum, other roundings), on a copy of the tree: the bits must differ.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s31-split.sh
set -u
R=$OUT/s TAG=s
source tools/h200/bench-lib.sh
git rev-parse HEAD > $R/commit.txt 2>/dev/null
probe split - split 330
probe fast-split BATCHLAB_GQA_SPLIT=1 fast 150
B=/tmp/broken; rm -rf $B; mkdir -p $B; cp -r batchlab $B/
sed -i 's|for (int off = 16 >> LG; off > 0; off >>= 1) {|for (int off = 1; off <= (16 >> LG); off <<= 1) {|' \
  $B/batchlab/engine/kernels/grouped_decode_looped.py
grep -c "off <= (16 >> LG)" $B/batchlab/engine/kernels/grouped_decode_looped.py > $R/broken.log
PYTHONPATH=/tmp/site:$B timeout 90 python3 - >> $R/broken.log 2>&1 <<'PY'
import mlx.core as mx
from batchlab.engine.kernels import grouped_decode as gd
mx.random.seed(0)
for hq, hkv, dim, b, keys in ((32, 8, 128, 64, 192), (32, 8, 64, 64, 100), (16, 8, 128, 5, 33)):
    q = mx.random.normal((b, hq, 1, dim)).astype(mx.bfloat16)
    k = mx.random.normal((b, hkv, keys, dim)).astype(mx.bfloat16)
    v = mx.random.normal((b, hkv, keys, dim)).astype(mx.bfloat16)
    ours = gd.grouped_decode_attention(q, k, v, dim ** -0.5, "looped", 8, split=True)
    mlx = mx.fast.scaled_dot_product_attention(q, k, v, scale=dim ** -0.5, mask=None)
    print(f"broken split G={hq // hkv} D={dim} B={b} keys={keys}:",
          "SAME (the probe missed it)" if mx.array_equal(ours, mlx).item() else "DIFFER (caught)")
PY
echo "== broken on purpose: exit $?"; cat $R/broken.log; pack

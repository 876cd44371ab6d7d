# Issue 28, h200e, call 3 (after the two staging calls of h200b's CUDA wheel): the grouped
# decode kernel that reproduces MLX's bits. The branch travels as .gpu-stage/h200e/h200e.tgz
# (git archive HEAD batchlab tools matrices) and is unpacked over a copy of the tree in
# /tmp/h200e-tree. Probe (kernel against mx.fast.scaled_dot_product_attention, bit for
# bit; fast's trajectories with and without it), then the path's CUDA gate (cuda.toml
# fast cells, --live) with the kernel on (the default) and, for the fusion's verdict,
# with BATCHLAB_FAST_FUSE=1.
# Run as: source .gpu-stage/h200b/p3/install.sh && bash .gpu-stage/h200e/s10-h200e-exact.sh
set -u
T=/tmp/h200e-tree
rm -rf $T && mkdir -p $T && tar cf - --exclude=./.gpu-stage . | tar xf - -C $T
tar xzf .gpu-stage/h200e/h200e.tgz -C $T && cd $T || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/e; mkdir -p $R
pack() { tar czf $OUT/e.tgz -C $OUT e; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
git -C /tmp/h200e-tree log -1 --format=%h 2>/dev/null; cat .h200e-commit 2>/dev/null
timeout 150 python3 tools/h200/gqa_exact_probe.py kernel > $R/probe-kernel.txt 2>&1
echo "== probe kernel: exit $?"; cat $R/probe-kernel.txt | tail -40; pack
timeout 150 python3 tools/h200/gqa_exact_probe.py fast > $R/probe-fast.txt 2>&1
echo "== probe fast: exit $?"; tail -8 $R/probe-fast.txt; pack
M="python3 -m batchlab matrix run --matrix matrices/cuda.toml --live --filter fast/* --jobs 6"
timeout 170 $M --report $R/gate-on > $R/gate-on.log 2>&1
echo "== gate (kernel on, the default): exit $?"; tail -4 $R/gate-on.log; pack
timeout 90 env BATCHLAB_FAST_FUSE=1 $M --filter 'fast/*/B64/*' --report $R/gate-fuse > $R/gate-fuse.log 2>&1
echo "== gate B64 with the fusion: exit $?"; tail -4 $R/gate-fuse.log; pack
ls -R $R | head -30

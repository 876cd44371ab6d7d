# Issue 28, fourteenth round, third machine, call 1: the k|v GEMM where measured exact
# (kv_product.py, on by default): fast's bytes with it against two GEMMs at every row
# count a shrinking B=256 batch passes (gqa_exact_probe.py kv), fast's bytes with the
# grouped kernel against MLX's attention (fast), and the flat forward against the
# modules' (flat). ~6 minutes.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s36-kv.sh
# (Ran with kv_product.py in the engine; it and gqa_exact_probe.py's kv part were removed
# at 999051c, so this script no longer runs as it did: reports/bench/cuda-sm90/issue28-kv/.)
set -u
R=$OUT/g TAG=g
source tools/h200/bench-lib.sh
probe kv - kv 300
probe fast - fast 150
probe flat - flat 150

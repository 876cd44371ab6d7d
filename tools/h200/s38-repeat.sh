# Issue 28, fourteenth round, fifth machine: the control s36/s37 lacked. fast run twice
# with the same settings (gqa_exact_probe.py repeat) at the shapes and batch whose bytes
# changed with the k|v GEMM: are two identical runs the same bytes? ~3 minutes.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s38-repeat.sh
set -u
R=$OUT/j TAG=j
source tools/h200/bench-lib.sh
probe repeat - repeat 170

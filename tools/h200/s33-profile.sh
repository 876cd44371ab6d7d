# Issue 28, thirteenth round, last machine: where llama-3.1-8b B=256's fast step goes with
# the split sums on (the default) and off, kernel by kernel (Nsight Compute, 192 keys).
# ~2 minutes. Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s33-profile.sh
set -u
R=$OUT/p TAG=p
source tools/h200/bench-lib.sh
ncu_step 8b-fast-split - llama-3.1-8b 256 fast 64 100
ncu_step 8b-fast-mlx-sums BATCHLAB_GQA_SPLIT=0 llama-3.1-8b 256 fast 64 100

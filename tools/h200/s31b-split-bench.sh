# Issue 28, thirteenth round, call 2 (warm, after s31-split.sh): the decode step with the
# split sums (BATCHLAB_GQA_SPLIT=1) against MLX's sums, fast and l1 in the same process,
# interleaved. ~8 minutes, each step packs its output.
# Run as: bash tools/h200/s31b-split-bench.sh
set -u
R=$OUT/b TAG=b
source tools/h200/bench-lib.sh
bench 8b-split BATCHLAB_GQA_SPLIT=1 llama-3.1-8b 256 fast,l1 2 100
bench 8b-default BATCHLAB_GQA_SPLIT=0 llama-3.1-8b 256 fast,l1 2 100
bench 8b-split-2 BATCHLAB_GQA_SPLIT=1 llama-3.1-8b 256 fast,l1 2 100
bench 8b-split-ring BATCHLAB_GQA_SPLIT=1,BATCHLAB_GQA_RING=4 llama-3.1-8b 256 fast 2 80
bench 1b-split BATCHLAB_GQA_SPLIT=1 llama-3.2-1b 64,256 fast,l1 2 70
bench 1b-default BATCHLAB_GQA_SPLIT=0 llama-3.2-1b 64,256 fast,l1 2 70
pack

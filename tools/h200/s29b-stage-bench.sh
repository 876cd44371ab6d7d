# Issue 28, twelfth round, call 2 (warm, after s29-stage.sh; not run: the probe showed
# staging slower at the 8B heads): the decode step with the staged kernel
# (BATCHLAB_GQA_STAGE=1, W from STAGE_W) against the default, fast and l1 in the same
# process. ~8 minutes, each step packs its output.
# Run as: STAGE_W=16 bash tools/h200/s29b-stage-bench.sh
set -u
R=$OUT/b TAG=b
source tools/h200/bench-lib.sh
S="BATCHLAB_GQA_STAGE=1,BATCHLAB_GQA_WARPS=${STAGE_W:-16}"
bench 8b-stage $S llama-3.1-8b 256 fast,l1 2 100
bench 8b-default - llama-3.1-8b 256 fast,l1 2 100
bench 8b-stage-2 $S llama-3.1-8b 256 fast,l1 2 100
bench 1b-stage $S llama-3.2-1b 64,256 fast,l1 2 70
bench 1b-default - llama-3.2-1b 64,256 fast,l1 2 70
pack

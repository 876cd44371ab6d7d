# Issue 28, for the eighteenth round's first machine (prepared in the seventeenth, not yet
# run): what the seventeenth round's device time did not reach.
#   1. cuda-repeat.toml's llama-h32 B=64 cells with sampling and through the history
#      script, --live --repeat (run at the seventeenth round's end: 8/8,
#      reports/bench/cuda-sm90/issue28-chain/s45-8/; again after engine changes);
#   2. item 1: invariant against l1 at 8B B=256 with the GQA row kernel one key ahead
#      (the default) and four, in one process each, interleaved: the seventeenth round
#      ran only U=4 (31.9 ms/step against l1's 25.8), so U's gain in the step is unknown;
#   3. tiled_probe.py time (the small-B setting of 2 warps with 2 key loads), then
#      s42-next.sh parts 1 and 2 (cuDNN and the looped kernel over long contexts).
# Run as: bash tools/h200/s46-next.sh 1|2|3 (after staging; bench-lib's environment)
set -u
R=$OUT/n$1 TAG=n$1
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 400 python3 -m batchlab matrix run --matrix matrices/cuda-repeat.toml --live \
     --repeat --filter '*/llama-h32/B64/*' --jobs 4 --report $R/h32 > $R/h32.log 2>&1
   echo "== h32: exit $?"; grep -E "cells passed|FAIL|not repeatable" $R/h32.log | head -12
   rm -f $R/h32/heatmap.png; pack ;;
2) bench inv-u1 - llama-3.1-8b 256 l1,invariant 2 240
   bench inv-u4 BATCHLAB_ROW_ATTENTION_UNROLL=4 llama-3.1-8b 256 l1,invariant 2 240 ;;
3) timeout 200 python3 tools/h200/tiled_probe.py time > $R/time.log 2>&1
   echo "== time: exit $?"; cat $R/time.log; pack
   bash tools/h200/s42-next.sh 1; bash tools/h200/s42-next.sh 2 ;;
esac

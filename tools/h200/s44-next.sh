# Issue 28, for the seventeenth round's first machine (prepared in the sixteenth, not yet
# run). After the sixteenth round fast's decode attention on CUDA is the tiled kernel
# (grouped_decode_tiled.py): 1 warp a block from 1024 (row, KV head) blocks, 2 below.
#   1. the gate cells added after that round's device time: cuda-repeat.toml's fast cells
#      at B 1 and 4 past 256 keys (the chunked launch and its combine), --live --repeat;
#   2. tiled_probe.py time: the committed small-B setting (2 warps, 2 key loads) was not
#      timed at small B (s43-1b timed 2 warps with 4 key loads), nor long contexts with it;
#   3. the rest of s42-next.sh: cuDNN at small B over long contexts (part 1) and the looped
#      kernel at 8k-32k keys (part 2), for BATCHLAB_GQA_TILED=0;
#   4. item 1: the invariant path's GQA row kernel with keys loaded ahead
#      (BATCHLAB_ROW_ATTENTION_UNROLL; the same arithmetic, so GQA IDENTICAL must stay yes),
#      then the 8B B=256 bench of invariant against l1 at the best U.
# Run as: bash tools/h200/s44-next.sh 1|2|3 (after staging; bench-lib's environment)
set -u
R=$OUT/u$1 TAG=u$1
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 200 python3 -m batchlab matrix run --matrix matrices/cuda-repeat.toml --live \
     --repeat --filter 'fast/*/B[14]/*' --jobs 4 --report $R/small-b > $R/small-b.log 2>&1
   echo "== small-b: exit $?"; grep -E "cells passed|FAIL|not repeatable" $R/small-b.log | head -8
   rm -f $R/small-b/heatmap.png; pack ;;
2) timeout 200 python3 tools/h200/tiled_probe.py time > $R/time.log 2>&1
   echo "== time: exit $?"; cat $R/time.log; pack ;;
3) bash tools/h200/s42-next.sh 1; bash tools/h200/s42-next.sh 2 ;;
4) timeout 200 python3 tools/h200/row_gqa_probe.py > $R/row-gqa.log 2>&1
   echo "== row-gqa: exit $?"; cat $R/row-gqa.log; pack
   U=${U:-4}
   bench inv-u$U BATCHLAB_ROW_ATTENTION_UNROLL=$U llama-3.1-8b 256 l1,invariant 2 240
   bench inv-u1 - llama-3.1-8b 256 l1,invariant 2 240 ;;
esac

# Issue 28, for the sixteenth round's first machine (prepared in the fifteenth, not yet
# run). After fd22eb5 fast sends every unmasked decode call from 256 keys to its one-pass
# grouped kernel, at any block count:
#   1. cudnn_decode_probe.py with the small-B long-context shapes added after s40 (does
#      cuDNN repeat itself there? if so, a few-block rule could keep MLX's speed there);
#   2. gqa_exact_probe.py long: the kernel against MLX at B=1 and 4 over 8k-32k keys,
#      where one block a KV head walks every key (is a two-pass variant needed?);
#   3. the CUDA gate with --repeat: cuda.toml's fast and l1 cells, then cuda-repeat.toml
#      on batchlab and on mlx-lm's BatchGenerator.
# Run as: bash tools/h200/s42-next.sh 1|2|3 (after staging; bench-lib's environment)
set -u
R=$OUT/n TAG=n
source tools/h200/bench-lib.sh
case "$1" in
1) timeout 300 python3 tools/h200/cudnn_decode_probe.py > $R/cudnn.log 2>&1
   echo "== cudnn_decode_probe: exit $?"; cat $R/cudnn.log; pack ;;
2) probe long - long 300
   sed -n '/ours us/,$p' $R/probe-long.log ;;
3) for f in 'l1/*' 'fast/*'; do
     tag=cuda-$(echo $f | tr -d '/*')
     timeout 280 python3 -m batchlab matrix run --matrix matrices/cuda.toml --live --repeat \
       --filter "$f" --jobs 8 --report $R/$tag > $R/$tag.log 2>&1
     echo "== $tag: exit $?"; grep -E "cells passed|not repeatable" $R/$tag.log | head -8
     rm -f $R/$tag/heatmap.png; pack
   done ;;
esac

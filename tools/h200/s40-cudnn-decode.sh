# Issue 28, fifteenth round: is MLX's cuDNN decode attention (from 256 keys, unmasked,
# a slice of a buffer grown in steps of 256) repeatable and blind to the buffer's tail
# (cudnn_decode_probe.py, with cuDNN on and off), and does fast repeat itself at B=256
# past 256 keys with cuDNN off (gqa_exact_probe.py repeat)?
# Run on a warm machine after s39 (the environment is bench-lib.sh's).
set -u
R=$OUT/c TAG=c
source tools/h200/bench-lib.sh
for cudnn in 1 0; do
  MLX_CUDA_USE_CUDNN_SDPA=$cudnn MLX_CUDA_USE_CUDNN_SPDA=$cudnn timeout 120 \
    python3 tools/h200/cudnn_decode_probe.py > $R/cudnn-$cudnn.log 2>&1
  echo "== cudnn_decode_probe (cuDNN $cudnn): exit $?"; cat $R/cudnn-$cudnn.log; pack
done
probe repeat-nocudnn MLX_CUDA_USE_CUDNN_SDPA=0,MLX_CUDA_USE_CUDNN_SPDA=0 repeat 200

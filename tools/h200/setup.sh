# Sourced first in every H200 command: MLX (CUDA) on PYTHONPATH, the real model unpacked.
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
export BATCHLAB_CACHE=/tmp/blc
if [ ! -d $BATCHLAB_CACHE/zoo/smollm2-135m ]; then
  mkdir -p $BATCHLAB_CACHE/zoo && cat /tmp/stage/smolpart.* | tar -x -C $BATCHLAB_CACHE/zoo
fi

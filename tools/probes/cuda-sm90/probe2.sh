set -x
for m in llama-3.2-1b qwen3-0.6b; do
  python3 tools/probes/cuda-sm90/probe2.py $m
  MLX_MAX_OPS_PER_BUFFER=60 python3 tools/probes/cuda-sm90/probe2.py $m
  MLX_MAX_OPS_PER_BUFFER=200 python3 tools/probes/cuda-sm90/probe2.py $m
  MLX_USE_CUDA_GRAPHS=0 python3 tools/probes/cuda-sm90/probe2.py $m
done
m=llama-3.1-8b
python3 tools/probes/cuda-sm90/probe2.py $m
MLX_MAX_OPS_PER_BUFFER=200 python3 tools/probes/cuda-sm90/probe2.py $m
MLX_USE_CUDA_GRAPHS=0 python3 tools/probes/cuda-sm90/probe2.py $m

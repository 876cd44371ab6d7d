"""Attention kernels a path installs in place of MLX's: by row (invariant), quantized
(the kv paths on CUDA)."""

"""Attention over quantized keys and values on MLX's CUDA backend.

mlx-lm's ``quantized_scaled_dot_product_attention`` has no working kernel there (MLX
0.32.4 on the H200, reports/lab/qkv-cuda-sm90/): ``quantized_matmul`` refuses the strided
cache slices and the keys broadcast over a group's query heads ("No implementation for
problem shape"), and where it takes them, its Hopper kernel fails to build a TMA
descriptor for a cache's row strides ("Failed to initialize the TMA descriptor"). So on
CUDA the quantized paths dequantize the keys and values they hold and run the model
dtype's fused attention: the values the quantized kernel would compute with, in another
summation order, without its bandwidth saving (the H200 bench measures that cost).

The quantized paths use this only on CUDA (``attention_dispatch.py``): on the CPU they
run mlx-lm's helper, bit-exact against mlx-lm's serial quantized cache.
"""

from __future__ import annotations

import mlx.core as mx


def quantized_attention(  # not gated: gpu only
        queries: mx.array, q_keys: tuple, q_values: tuple, scale: float, mask, group_size: int,
        bits: int, sinks=None) -> mx.array:
    if sinks is not None:  # not gated: refusal
        raise ValueError("quantized KV does not take attention sinks (as mlx-lm's)")
    # contiguous parts: the cache hands over strided slices of its packed buffer
    keys = mx.dequantize(*map(mx.contiguous, q_keys), group_size=group_size, bits=bits)
    values = mx.dequantize(*map(mx.contiguous, q_values), group_size=group_size, bits=bits)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)

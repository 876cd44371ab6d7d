"""Attention over quantized keys and values on MLX's CUDA backend.

mlx-lm's ``quantized_scaled_dot_product_attention`` has no working kernel there (MLX
0.32.4 on the H200, reports/lab/qkv-cuda-sm90/): ``quantized_matmul`` refuses the strided
cache slices and the keys broadcast over a group's query heads ("No implementation for
problem shape"), and where it takes them, its Hopper kernel fails to build a TMA
descriptor for a cache's row strides ("Failed to initialize the TMA descriptor"). So on
CUDA the quantized paths run their own:

- decode (one query per row): ``quantized_decode.py``, a kernel that reads the packed
  cache words as stored (the owner cache's ``served_packed``) and dequantizes them in
  registers: the cache's bytes are read once and nothing is written back;
- prefill, and any call the kernel does not take (``quantized_decode.fits``): the keys
  and values dequantized to the model dtype, then the model dtype's fused attention.

Neither is mlx-lm's summation order, so on CUDA these paths are judged by KL
(``batchlab lab kl``; ``--live`` cells). ``BATCHLAB_QKV_FUSED=0`` turns the decode
kernel off (the dequantizing form for every call, as before issue 28's third round).

The quantized paths use this only on CUDA (``attention_dispatch.py``): on the CPU they
run mlx-lm's helper, bit-exact against mlx-lm's serial quantized cache.
"""

from __future__ import annotations

import os

import mlx.core as mx

from batchlab.engine.kernels import quantized_decode

FUSED_ENV = "BATCHLAB_QKV_FUSED"
FUSED = os.environ.get(FUSED_ENV, "1") != "0"


def quantized_attention(  # not gated: gpu only
        queries: mx.array, q_keys: tuple, q_values: tuple, scale: float, mask, group_size: int,
        bits: int, sinks=None, owner=None) -> mx.array:
    if sinks is not None:  # not gated: refusal
        raise ValueError("quantized KV does not take attention sinks (as mlx-lm's)")
    served = getattr(owner, "served_packed", None)
    # the packed words are used only when they are the very arrays these were cut from
    if FUSED and served is not None and served[0] is q_keys[0]:
        _, k_packed, v_packed, dk, dv = served
        if quantized_decode.fits(queries, k_packed, dk, dv, bits, group_size, mask):
            return quantized_decode.quantized_decode_attention(
                queries, k_packed, v_packed, scale, mask, dk, group_size, bits)
    # contiguous parts: the cache hands over strided slices of its packed buffer
    keys = mx.dequantize(*map(mx.contiguous, q_keys), group_size=group_size, bits=bits)
    values = mx.dequantize(*map(mx.contiguous, q_values), group_size=group_size, bits=bits)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)

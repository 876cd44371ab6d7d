"""Attention over quantized keys and values in a form MLX's CUDA backend runs.

mlx-lm's ``quantized_scaled_dot_product_attention`` broadcasts the keys over the query
heads of a group (``expand_dims``) and, from mlx-lm's own ``QuantizedKVCache``, gets
strided slices of its buffers; MLX 0.32.4's CUDA ``quantized_matmul`` refuses both ("No
implementation for problem shape", on the H200: reports/lab/qkv-cuda-sm90/). Here the
query heads of a group are folded into the rows of one product (B, kv heads, repeats x
L, D), so the keys are not broadcast, and every quantized part is contiguous. Where even
that has no kernel (``quantized_matmul_runs`` probes the shape once), the keys and values
are dequantized and the model dtype's fused attention runs on them: the same values,
without the bandwidth saving.

The quantized paths use this only on CUDA (``attention_dispatch.py``): on the CPU they
run mlx-lm's helper, bit-exact against mlx-lm's serial quantized cache.
"""

from __future__ import annotations

import functools

import mlx.core as mx


@functools.cache
def quantized_matmul_runs(dtype: mx.Dtype, dim: int, group_size: int, bits: int,  # not gated: gpu only
                          transpose: bool) -> bool:
    """Whether this backend's quantized_matmul has a kernel for the attention's shapes."""
    x = mx.zeros((1, 2, 5, dim if transpose else 9), dtype)
    w = mx.zeros((1, 2, 9, dim), dtype)
    try:
        parts = mx.quantize(w, group_size=group_size, bits=bits)
        mx.eval(mx.quantized_matmul(x, *parts, transpose=transpose, group_size=group_size,
                                    bits=bits))
        return True
    except (RuntimeError, ValueError):
        return False


def _bool_mask(mask, rows: int, width: int):
    if mask is None or not isinstance(mask, str):
        return mask
    q = mx.arange(width - rows, width)
    return q[:, None] >= mx.arange(width)[None]


def quantized_attention(queries: mx.array, q_keys: tuple, q_values: tuple, scale: float,  # not gated: gpu only
                        mask, group_size: int, bits: int, sinks=None) -> mx.array:
    if sinks is not None:
        raise ValueError("quantized KV does not take attention sinks (as mlx-lm's)")
    B, n_q_heads, L, D = queries.shape
    n_kv_heads = q_keys[0].shape[1]
    dv = q_values[1].shape[-1] * group_size
    if not (quantized_matmul_runs(queries.dtype, D, group_size, bits, True)
            and quantized_matmul_runs(queries.dtype, dv, group_size, bits, False)):
        keys = mx.dequantize(*q_keys, group_size=group_size, bits=bits)
        values = mx.dequantize(*q_values, group_size=group_size, bits=bits)
        return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale,
                                                    mask=mask)
    repeats = n_q_heads // n_kv_heads
    q = (queries * scale).reshape(B, n_kv_heads, repeats * L, D)
    keys = tuple(mx.contiguous(t) for t in q_keys)
    values = tuple(mx.contiguous(t) for t in q_values)
    scores = mx.quantized_matmul(q, *keys, transpose=True, group_size=group_size, bits=bits)
    mask = _bool_mask(mask, L, scores.shape[-1])
    if mask is not None:
        if mask.ndim == 4:  # (B or 1, 1, L, width): the same mask for every repeat
            mask = mx.tile(mask, (1, 1, repeats, 1))
        else:
            mask = mx.tile(mask, (repeats, 1))
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    scores = mx.softmax(scores, axis=-1, precise=True)
    out = mx.quantized_matmul(scores, *values, transpose=False, group_size=group_size,
                              bits=bits)
    return out.reshape(B, n_q_heads, L, dv)

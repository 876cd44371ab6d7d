"""Prefill attention over exactly each row's own keys: many prompts in one forward, each
row's bits those of its run alone (the invariant path's batched prefill, issue 28).

A prefill chunk of a batch is right-padded: row ``b`` has ``counts[b]`` real queries
(the first ones) and its keys are the columns ``first[b] .. ends[b]`` of the view its
cache handed the layer (its left padding cut in front, the chunk's right padding behind).
Query ``i`` of row ``b`` sees, causally, the keys ``first[b] .. ends[b] - (counts[b] - 1
- i)``. Padding queries get zeros (their keys are never read: every later read of this
row starts at ``first``).

- On CUDA: one custom kernel (``mx.fast.cuda_kernel``) per layer, a block per (row,
  query, head), the decode kernel's reduction (``row_attention.py``: warp ``w`` takes the
  keys ``w, w + 4, ...`` from the row's first key, an online softmax, warps combined in
  order) with a per-query key count; (row, query) pairs run along the grid's x axis
  (its z axis stops at 65535 blocks). What a query computes depends on its own row's
  keys only: not on B, the row's position, the key width or the neighbours' padding,
  so a prompt prefilled among others has the bits of the same prompt prefilled alone
  through the same kernel.
- Elsewhere (the CPU gate of ``invariant-blocked``): one fused causal call per row over
  its own queries and keys, the shapes of its run alone.
"""

from __future__ import annotations

import functools

import mlx.core as mx

from batchlab.backend import on_cuda
from batchlab.engine.kernels.row_attention import (
    _KERNEL_HEADER,
    _KERNEL_SOURCE,
    WARPS,
    refuse_scores_on_cuda,
)


def _prefill_source() -> str:  # not gated: gpu only (the CUDA kernel's text)
    """The decode kernel's source with a query index and a per-query key range."""
    src = _KERNEL_SOURCE
    swaps = [
        ("const int b = blockIdx.z;",
         "const int n_q = q_shape[2];\n    const int b = blockIdx.x / n_q;\n"
         "    const int qi = blockIdx.x % n_q;"),
        ("const int n = width - first;",
         "const int cb = counts[b];\n"
         "    const int n = qi < cb ? ends[b] - (cb - 1 - qi) - first : 0;"),
        ("const T* qp = q + b * q_strides[0] + h * q_strides[1];",
         "const T* qp = q + b * q_strides[0] + h * q_strides[1] + qi * q_strides[2];"),
        ("T* op = out + (b * n_q_heads + h) * dv;",
         "T* op = out + ((b * n_q_heads + h) * n_q + qi) * dv;"),
        ("if (d < dv) op[d] = static_cast<T>(outv[i] / total);",
         "if (d < dv) op[d] = qi < cb ? static_cast<T>(outv[i] / total) "
         ": static_cast<T>(0.0f);"),
        ("const int width = k_shape[2];\n", ""),
    ]
    for old, new in swaps:
        if old not in src:  # not gated: gpu only (a guard on the decode kernel's text)
            raise RuntimeError(f"row_prefill: the decode kernel no longer has {old!r}")
        src = src.replace(old, new)
    return src


@functools.cache
def _kernel():  # not gated: gpu only
    return mx.fast.cuda_kernel(
        name="batchlab_row_prefill_attention",
        input_names=["q", "k", "v", "first_keys", "ends", "counts", "scale", "sinks"],
        output_names=["out"], source=_prefill_source(), header=_KERNEL_HEADER,
        ensure_row_contiguous=False)


# (first, ends, counts) -> the three int32 arrays: every layer of a forward asks for the
# same spans, so one upload per forward, not one per layer
_SPANS: dict[tuple, tuple[mx.array, mx.array, mx.array]] = {}


def _span_arrays(  # not gated: gpu only
        first: tuple[int, ...], ends: tuple[int, ...], counts: tuple[int, ...]):
    key = (first, ends, counts)
    arrays = _SPANS.get(key)
    if arrays is None:
        _SPANS.clear()
        arrays = tuple(mx.array(list(x), dtype=mx.int32) for x in key)
        _SPANS[key] = arrays
    return arrays


def row_prefill_attention(queries: mx.array, keys: mx.array, values: mx.array,
                          first: tuple[int, ...], ends: tuple[int, ...],
                          counts: tuple[int, ...], scale: float,
                          sinks: mx.array | None = None,
                          scores: mx.array | None = None) -> mx.array:
    """Attention (B, H, N, Dv) of row ``b``'s first ``counts[b]`` queries over its keys
    ``first[b] .. ends[b]``, causal (the last real query sees the last key); zeros for
    the padding queries. ``scores`` (B, H, N, S): what the model adds to the logits (MLA:
    ``where(mask, q_pe @ k_pe^T, min)``, causality included), row ``b``'s own part."""
    if on_cuda():  # not gated: gpu only
        refuse_scores_on_cuda(scores)
        return _cuda(queries, keys, values, first, ends, counts, scale, sinks)
    n = queries.shape[2]
    outs = []
    for b in range(queries.shape[0]):
        c = counts[b]
        if c == 0:  # not gated: mid-prefill (a row with nothing left waits for its join)
            outs.append(mx.zeros((1, *queries.shape[1:3], values.shape[-1]), queries.dtype))
            continue
        own = None if scores is None else scores[b : b + 1, :, :c, first[b] : ends[b]]
        out = mx.fast.scaled_dot_product_attention(
            queries[b : b + 1, :, :c], keys[b : b + 1, :, first[b] : ends[b]],
            values[b : b + 1, :, first[b] : ends[b]], scale=scale,
            mask="causal" if own is None else own, sinks=sinks)
        if c < n:
            out = mx.pad(out, [(0, 0), (0, 0), (0, n - c), (0, 0)])
        outs.append(out)
    return outs[0] if len(outs) == 1 else mx.concatenate(outs)


def _cuda(queries, keys, values, first, ends, counts, scale, sinks):  # not gated: gpu only
    b, n_heads, n, _ = queries.shape
    dv = values.shape[-1]
    maxd = 32 * -(-max(queries.shape[-1], dv) // 32)
    with_sinks = sinks is not None
    firsts, end_cols, real = _span_arrays(first, ends, counts)
    inputs = [queries, keys, values, firsts, end_cols, real,
              mx.array([scale], dtype=mx.float32),
              sinks if with_sinks else mx.zeros((1,), dtype=mx.float32)]
    return _kernel()(
        inputs=inputs,
        template=[("T", queries.dtype), ("MAXD", maxd), ("NW", WARPS),
                  ("HAS_SINKS", with_sinks)],
        grid=(32 * WARPS * b * n, n_heads, 1), threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(b, n_heads, n, dv)], output_dtypes=[queries.dtype])[0]

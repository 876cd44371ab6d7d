"""Decode attention over exactly each row's keys, in an order fixed by the row alone.

On a GPU, MLX's masked decode attention is not batch-invariant: with a mask array its
CUDA backend leaves the fused kernels (``sdpa_vector`` takes no mask array, cuDNN decodes
only from fixed-size caches) for the unfused fallback, whose ``scores @ V`` product
reduces over the batch's key width, so a row's sum is grouped by where its keys sit
among its neighbours' padding. The invariant path's decode attention runs here instead:

- on CUDA, one custom kernel (``mx.fast.cuda_kernel``) per layer: a block per (row, query
  head), four warps; warp ``w`` takes the row's keys ``w, w + 4, ...`` counted from the
  row's first valid key, with an online softmax, and the warps are combined in order.
  A row's result depends on its own keys only: not on B, its position, the key width
  or the padding in front of it;
- on other backends (the CPU gate of ``invariant-blocked``), each row's attention is one
  fused call over its own keys (no mask, no padding): the same shapes as alone.

Which keys a row sees comes from its cache (``first_keys``): columns from the row's
first valid key to the end of the view the cache handed the layer. The model's calls
reach this module through ``attention_dispatch.py``.
"""

from __future__ import annotations

import functools
import os

import mlx.core as mx

from batchlab.backend import on_cuda
from batchlab.engine.kernels import row_attention_gqa as gqa

WARPS = 4  # warps per (row, head) block; part of the fixed reduction order
# Grouped-query models: one block per (row, KV head) for its query group
# (``row_attention_gqa.py``), the same arithmetic per query head: on the H200 its output
# equalled this kernel's bit for bit at every shape probed (tools/h200/row_gqa_probe.py),
# and the invariance gate passed with it. ``BATCHLAB_ROW_ATTENTION_GQA=0`` turns it off.
GQA_ENV = "BATCHLAB_ROW_ATTENTION_GQA"
GQA = os.environ.get(GQA_ENV, "1") != "0"

_KERNEL_SOURCE = """
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_q_heads = q_shape[1];
    if (b >= k_shape[0]) {  // a padding row of the decode batch: zeros, no keys read
        if (warp == 0) {
            T* op = out + (b * n_q_heads + h) * v_shape[3];
            for (int d = lane; d < v_shape[3]; d += 32) op[d] = static_cast<T>(0.0f);
        }
        return;
    }
    const int n_kv_heads = k_shape[1];
    const int width = k_shape[2];
    const int dk = k_shape[3];
    const int dv = v_shape[3];
    const int kv_head = h / (n_q_heads / n_kv_heads);
    const int first = first_keys[b];
    const int n = width - first;
    const float sc = scale[0];
    constexpr int PER_LANE = MAXD / 32;

    float qv[PER_LANE];
    float acc[PER_LANE];
    const T* qp = q + b * q_strides[0] + h * q_strides[1];
    for (int i = 0; i < PER_LANE; ++i) {
        int d = lane + 32 * i;
        qv[i] = d < dk ? static_cast<float>(qp[d * q_strides[3]]) * sc : 0.0f;
        acc[i] = 0.0f;
    }
    float m = NEG_INF;
    float l = 0.0f;
    const T* kb = k + b * k_strides[0] + kv_head * k_strides[1];
    const T* vb = v + b * v_strides[0] + kv_head * v_strides[1];
    for (int r = warp; r < n; r += NW) {
        const T* kp = kb + (first + r) * k_strides[2];
        float s = 0.0f;
        for (int i = 0; i < PER_LANE; ++i) {
            int d = lane + 32 * i;
            if (d < dk) s += qv[i] * static_cast<float>(kp[d * k_strides[3]]);
        }
        // a butterfly: every lane ends with the same sum (a + b == b + a exactly)
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
        float m_new = fmaxf(m, s);
        float corr = expf(m - m_new);
        float p = expf(s - m_new);
        l = l * corr + p;
        const T* vp = vb + (first + r) * v_strides[2];
        for (int i = 0; i < PER_LANE; ++i) {
            int d = lane + 32 * i;
            if (d < dv) acc[i] = acc[i] * corr + p * static_cast<float>(vp[d * v_strides[3]]);
        }
        m = m_new;
    }
    __shared__ float warp_m[NW];
    __shared__ float warp_l[NW];
    __shared__ float warp_acc[NW][MAXD];
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
    for (int i = 0; i < PER_LANE; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    if (warp == 0) {
        float big = HAS_SINKS ? static_cast<float>(sinks[h]) : NEG_INF;
        for (int w = 0; w < NW; ++w) big = fmaxf(big, warp_m[w]);
        float total = HAS_SINKS ? expf(static_cast<float>(sinks[h]) - big) : 0.0f;
        float outv[PER_LANE];
        for (int i = 0; i < PER_LANE; ++i) outv[i] = 0.0f;
        for (int w = 0; w < NW; ++w) {
            float c = expf(warp_m[w] - big);
            total += warp_l[w] * c;
            for (int i = 0; i < PER_LANE; ++i) outv[i] += warp_acc[w][lane + 32 * i] * c;
        }
        T* op = out + (b * n_q_heads + h) * dv;
        for (int i = 0; i < PER_LANE; ++i) {
            int d = lane + 32 * i;
            if (d < dv) op[d] = static_cast<T>(outv[i] / total);
        }
    }
"""


_KERNEL_HEADER = "#define NEG_INF (-__int_as_float(0x7f800000))\n"


@functools.cache
def _kernel():  # not gated: gpu only
    return mx.fast.cuda_kernel(
        name="batchlab_row_attention",
        input_names=["q", "k", "v", "first_keys", "scale", "sinks"], output_names=["out"],
        source=_KERNEL_SOURCE, header=_KERNEL_HEADER, ensure_row_contiguous=False)


def row_attention(queries: mx.array, keys: mx.array, values: mx.array, first_keys: mx.array,
                  scale: float, sinks: mx.array | None = None,
                  scores: mx.array | None = None) -> mx.array:
    """Decode attention (one query per row) of row ``b`` over ``keys[b, :, first_keys[b]:]``;
    zeros for the query rows past the keys' (a decode batch padded to a GEMM block).
    ``scores`` (B, H, 1, S): what the model adds to the attention logits (MLA's
    decoupled key part), row ``b``'s own columns added to its own."""
    if on_cuda():  # not gated: gpu only
        refuse_scores_on_cuda(scores)
        return _cuda_row_attention(queries, keys, values, first_keys, scale, sinks)
    outs = []
    for b, first in enumerate(first_keys.tolist()):
        outs.append(mx.fast.scaled_dot_product_attention(
            queries[b : b + 1], keys[b : b + 1, :, first:], values[b : b + 1, :, first:],
            scale=scale, sinks=sinks,
            mask=None if scores is None else scores[b : b + 1, ..., first:]))
    pad = queries.shape[0] - keys.shape[0]
    if pad:
        outs.append(mx.zeros((pad, *queries.shape[1:3], values.shape[-1]), queries.dtype))
    return mx.concatenate(outs)


def refuse_scores_on_cuda(scores: mx.array | None) -> None:  # not gated: gpu only
    """The CUDA row kernels add nothing to the logits: refuse scores rather than drop
    them (the invariant path refuses such models there: ``latent_attention_reason``)."""
    if scores is not None:
        raise ValueError("the CUDA row attention kernels take no additive scores (MLA); "
                         "use path l1")


@functools.cache
def _constants(scale: float) -> tuple[mx.array, mx.array]:  # not gated: gpu only
    """The kernel's scale and its unused sinks stand-in: made (and evaluated) once, not
    two uploads per layer and step."""
    arrays = mx.array([scale], dtype=mx.float32), mx.zeros((1,), dtype=mx.float32)
    mx.eval(arrays)
    return arrays


def _cuda_row_attention(queries, keys, values, first_keys, scale, sinks):  # not gated: gpu only
    b, n_heads, _, _ = queries.shape
    dv = values.shape[-1]
    maxd = 32 * -(-max(queries.shape[-1], dv) // 32)
    with_sinks = sinks is not None
    scale_arr, no_sinks = _constants(float(scale))
    if first_keys.dtype != mx.int32:  # not gated: gpu only
        first_keys = first_keys.astype(mx.int32)
    inputs = [queries, keys, values, first_keys, scale_arr,
              sinks if with_sinks else no_sinks]  # sinks read only with sinks
    if GQA and gqa.fits(n_heads, keys.shape[1], maxd):
        return gqa.gqa_row_attention(inputs, queries.dtype, b, n_heads, keys.shape[1], dv,
                                     maxd, with_sinks)
    return _kernel()(
        inputs=inputs,
        template=[("T", queries.dtype), ("MAXD", maxd), ("NW", WARPS),
                  ("HAS_SINKS", with_sinks)],
        grid=(32 * WARPS, n_heads, b), threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(b, n_heads, 1, dv)], output_dtypes=[queries.dtype])[0]

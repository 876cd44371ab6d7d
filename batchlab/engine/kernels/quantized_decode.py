"""Decode attention that reads the packed quantized cache (CUDA, ``mx.fast.cuda_kernel``).

The quantized paths' cache stores one uint32 array per side, each key's ints followed by
its scales and biases (``engine/paths/quantized/kv.py``)::

    D 64, 4 bits, group 64 (bf16):  [ w0 .. w7 | s b ]   9 words per key and head

Before this kernel, CUDA decode dequantized the whole cache every step (a bf16 copy of K
and V written and read again) and ran MLX's masked attention: slower than l1 at every
shape measured (reports/bench/cuda-sm90/issue28-b4e0cec/). Here the packed words are
read once, dequantized in registers, and never written back:

- a block per (row, KV head, chunk of keys) serves the group's ``G`` query heads, so
  each KV head's words are read once, not once per query head;
- ``L = D * bits / 32`` lanes share a key, lane ``w`` owning its word ``w`` of the key
  and of the value (the ``32 / bits`` dims that word packs); a warp holds ``32 / L``
  such key streams, and each stream keeps an online softmax per query head;
- the streams of a block are combined in shared memory into one partial (max, sum,
  unnormalised output) per chunk, and a second launch combines the chunks in order.

Scores and sums are float32; the output is the model dtype. It is not mlx-lm's
``quantized_scaled_dot_product_attention`` bit for bit (another summation order, no
bf16 rounding of scores and probabilities), so on CUDA the quantized paths stay judged
by KL, as they were with the dequantizing fallback. The CPU never runs it.
"""

from __future__ import annotations

import functools
import math

import mlx.core as mx

from batchlab.engine.kernels.decode_streams import (
    NEG_INF_HEADER,
    WRITE_PARTIAL,
    merge_streams,
    no_mask,
    scale_array,
)

WARPS = 4
MAX_SHARED_FLOATS = 8192  # the streams' partials (32 KB): streams x G x D floats
TARGET_BLOCKS = 2048  # ~16 resident blocks per SM on the H200's 132: enough loads in flight

_STREAMS = """
    constexpr int VPW = 32 / BITS;          // values per word
    constexpr int L = D * BITS / 32;        // lanes (words) per key
    constexpr int S = 32 / L;               // key streams per warp
    constexpr int NST = NW * S;             // key streams per block
    constexpr int GROUPS = D / GS;
    constexpr unsigned QMASK = (1u << BITS) - 1u;
    const int c = blockIdx.x;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int sub = lane / L;
    const int wl = lane % L;
    const int st = warp * S + sub;
    const int n_q_heads = q_shape[1];
    const int n_chunks = gridDim.x;
    const int width = kp_shape[2];
    const int chunk = (width + n_chunks - 1) / n_chunks;
    const int start = c * chunk;
    const int end = min(width, start + chunk);
    const float sc = scale[0];
    const int gi = (wl * VPW) / GS;         // this lane's quantization group

    float qv[G][VPW];
    float acc[G][VPW];
    float m[G];
    float l[G];
    for (int j = 0; j < G; ++j) {
        const T* qp = q + b * q_strides[0] + (g * G + j) * q_strides[1];
        for (int i = 0; i < VPW; ++i) {
            qv[j][i] = static_cast<float>(qp[(wl * VPW + i) * q_strides[3]]) * sc;
            acc[j][i] = 0.0f;
        }
        m[j] = NEG_INF;
        l[j] = 0.0f;
    }
    const uint32_t* kb = kp + b * kp_strides[0] + g * kp_strides[1];
    const uint32_t* vb = vp + b * vp_strides[0] + g * vp_strides[1];
    // the loop is uniform over a warp (base moves by warp), so every lane reaches the
    // shuffles; a lane whose key is past the chunk or masked adds nothing
    for (int base = start + warp * S; base < end; base += NST) {
        const int r = base + sub;
        bool ok = r < end;
        if (HAS_MASK && ok) ok = mask[b * mask_strides[0] + r * mask_strides[3]];
        float kd[VPW];
        float vd[VPW];
        if (ok) {
            const uint32_t* kr = kb + r * kp_strides[2];
            const uint32_t* vr = vb + r * vp_strides[2];
            const uint32_t kw = kr[wl];
            const uint32_t vw = vr[wl];
            const T* ksb = reinterpret_cast<const T*>(kr + L);
            const T* vsb = reinterpret_cast<const T*>(vr + L);
            const float ks = static_cast<float>(ksb[gi]);
            const float kbias = static_cast<float>(ksb[GROUPS + gi]);
            const float vs = static_cast<float>(vsb[gi]);
            const float vbias = static_cast<float>(vsb[GROUPS + gi]);
            for (int i = 0; i < VPW; ++i) {
                kd[i] = ks * static_cast<float>((kw >> (BITS * i)) & QMASK) + kbias;
                vd[i] = vs * static_cast<float>((vw >> (BITS * i)) & QMASK) + vbias;
            }
        } else {
            for (int i = 0; i < VPW; ++i) kd[i] = vd[i] = 0.0f;
        }
        for (int j = 0; j < G; ++j) {
            float s = 0.0f;
            for (int i = 0; i < VPW; ++i) s += qv[j][i] * kd[i];
            // xor offsets below L stay inside this key's L lanes
            for (int off = L / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
            if (ok) {
                const float m_new = fmaxf(m[j], s);
                const float corr = expf(m[j] - m_new);
                const float p = expf(s - m_new);
                l[j] = l[j] * corr + p;
                for (int i = 0; i < VPW; ++i) acc[j][i] = acc[j][i] * corr + p * vd[i];
                m[j] = m_new;
            }
        }
    }
"""

_SOURCE = _STREAMS + merge_streams("VPW") + WRITE_PARTIAL

_COMBINE = """
    const int row = blockIdx.x;             // (b, h) flattened
    const int n_chunks = part_m_shape[2];
    const int dv = part_acc_shape[3];
    const float* pm = part_m + row * n_chunks;
    const float* pl = part_l + row * n_chunks;
    const float* pa = part_acc + row * n_chunks * dv;
    float big = NEG_INF;
    for (int c = 0; c < n_chunks; ++c) big = fmaxf(big, pm[c]);
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float total = 0.0f;
        float o = 0.0f;
        if (big != NEG_INF) {
            for (int c = 0; c < n_chunks; ++c) {
                const float f = expf(pm[c] - big);
                total += pl[c] * f;
                o += pa[c * dv + d] * f;
            }
        }
        out[row * dv + d] = static_cast<T>(total > 0.0f ? o / total : 0.0f);
    }
"""



@functools.cache
def _kernels():  # not gated: gpu only
    main = mx.fast.cuda_kernel(
        name="batchlab_quantized_decode",
        input_names=["q", "kp", "vp", "mask", "scale"],
        output_names=["part_m", "part_l", "part_acc"],
        source=_SOURCE, header=NEG_INF_HEADER, ensure_row_contiguous=False)
    combine = mx.fast.cuda_kernel(
        name="batchlab_quantized_decode_combine",
        input_names=["part_m", "part_l", "part_acc"], output_names=["out"],
        source=_COMBINE, header=NEG_INF_HEADER, ensure_row_contiguous=True)
    return main, combine


def fits(queries: mx.array, k_packed: mx.array, dim: int, dv: int, bits: int, group_size: int,
         mask) -> bool:  # not gated: gpu only
    """Whether the kernel takes this call: one query per row, K and V of one head dim
    whose packed words fill whole warps' lane groups, a grouped query layout of at most 8
    heads a group, a boolean mask of one query row over exactly the served keys."""
    n_q, n_kv = queries.shape[1], k_packed.shape[1]
    words = dim * bits // 32
    if queries.shape[2] != 1 or dim != dv or queries.shape[-1] != dim:
        return False
    if words < 1 or words > 32 or 32 % words or n_q % n_kv or n_q // n_kv > 8:
        return False
    streams = WARPS * (32 // words)
    if streams * (n_q // n_kv) * dim > MAX_SHARED_FLOATS:
        return False
    if mask is None:
        return True
    return (isinstance(mask, mx.array) and mask.dtype == mx.bool_ and mask.ndim == 4
            and mask.shape[1] == 1 and mask.shape[2] == 1
            and mask.shape[-1] == k_packed.shape[2]
            and mask.shape[0] in (1, queries.shape[0]))


def num_chunks(rows: int, kv_heads: int, width: int) -> int:  # not gated: gpu only
    """Chunks of keys per (row, KV head): enough blocks to keep the GPU's loads in
    flight, but no chunk under 64 keys."""
    want = math.ceil(TARGET_BLOCKS / max(1, rows * kv_heads))
    return max(1, min(want, math.ceil(width / 64)))


def quantized_decode_attention(  # not gated: gpu only
        queries: mx.array, k_packed: mx.array, v_packed: mx.array, scale: float, mask,
        dim: int, group_size: int, bits: int) -> mx.array:
    """softmax(q . K^T * scale, masked) . V for one query per row, reading the packed
    cache ``(B, H_kv, W, words)`` as stored; ``mask`` None or bool ``(B|1, 1, 1, W)``."""
    b, n_q, _, _ = queries.shape
    n_kv, width = k_packed.shape[1], k_packed.shape[2]
    n_chunks = num_chunks(b, n_kv, width)
    main = _kernels()[0]
    has_mask = mask is not None
    if has_mask and mask.shape[0] != b:  # not gated: gpu only
        mask = mx.broadcast_to(mask, (b, 1, 1, width))
    group = n_q // n_kv
    part_m, part_l, part_acc = main(
        inputs=[queries, k_packed, v_packed, mask if has_mask else no_mask(), scale_array(scale)],
        template=[("T", queries.dtype), ("BITS", bits), ("GS", group_size), ("D", dim),
                  ("G", group), ("NW", WARPS), ("HAS_MASK", has_mask)],
        grid=(32 * WARPS * n_chunks, n_kv, b), threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(b, n_q, n_chunks), (b, n_q, n_chunks), (b, n_q, n_chunks, dim)],
        output_dtypes=[mx.float32, mx.float32, mx.float32])
    return combine_chunks(part_m, part_l, part_acc, queries.dtype)


def combine_chunks(part_m: mx.array, part_l: mx.array, part_acc: mx.array,
                   dtype: mx.Dtype) -> mx.array:  # not gated: gpu only
    """The chunks' partials ``(B, H, C)``, ``(B, H, C)``, ``(B, H, C, D)`` (max, sum,
    unnormalised output) combined in chunk order: the attention output ``(B, H, 1, D)``."""
    b, n_q, _, dim = part_acc.shape
    combine = _kernels()[1]
    return combine(
        inputs=[part_m, part_l, part_acc], template=[("T", dtype)],
        grid=(128 * b * n_q, 1, 1), threadgroup=(128, 1, 1),
        output_shapes=[(b, n_q, 1, dim)], output_dtypes=[dtype])[0]

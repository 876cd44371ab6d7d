"""Decode attention that reads each KV head once for its query group (CUDA, ``fast``).

MLX's fused decode attention (``sdpa_vector``) on CUDA reads a KV head's keys and values
once per *query* head: under GQA most of a large-B decode step's attention time
(docs/performance.md, issue 28's per-kernel profile). Here:

- a block per (row, KV head, chunk of keys) serves the group's ``G`` query heads, so
  each key and value is read from memory once;
- ``L = D / VPL`` lanes share a key, each owning ``VPL`` consecutive dims (one 8- or
  16-byte load); a warp holds ``32 / L`` key streams;
- each stream issues the loads of ``U`` keys and values in one straight line before it
  uses any (``2 U`` loads in flight a lane, kept packed in registers), then folds the
  ``U`` scores into one online-softmax update per query head;
- the streams of a block are combined in shared memory (``decode_streams.py``, shared
  with the quantized decode kernel); with one chunk the block writes the output,
  otherwise a second launch (``quantized_decode.combine_chunks``) combines the chunks
  in order.

Scores, softmax and sums are float32, the output the model dtype. Not MLX's kernel bit
for bit (another summation order), so only ``fast`` uses it, on CUDA, where that path is
already judged by KL against the oracle; l1 and the CPU never run it.
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
from batchlab.engine.kernels.quantized_decode import combine_chunks

WARPS = 4
UNROLL = 8  # keys a stream loads before it uses them
MAX_SHARED_FLOATS = 8192  # the streams' partials (32 KB): streams x G x D floats
TARGET_BLOCKS = 2048  # ~16 resident blocks per SM on the H200's 132
MAX_KEYS = 1024  # past it MLX runs its two-pass kernel, at the bandwidth: leave it that
MIN_CHUNK = 256  # B=1 at a few hundred keys: one launch, no combine

_STREAMS = """
    constexpr int L = D / VPL;              // lanes per key
    constexpr int S = 32 / L;               // key streams per warp
    constexpr int NST = NW * S;             // key streams per block
    struct alignas(sizeof(T) * VPL) Vec { T v[VPL]; };
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
    const int width = k_shape[2];
    const int chunk = (width + n_chunks - 1) / n_chunks;
    const int start = c * chunk;
    const int end = min(width, start + chunk);
    const float sc = scale[0];
    // vector loads need unit-stride dims and rows that keep the vector's alignment
    const bool vec = k_strides[3] == 1 && v_strides[3] == 1
        && k_strides[2] % VPL == 0 && v_strides[2] % VPL == 0
        && k_strides[1] % VPL == 0 && v_strides[1] % VPL == 0
        && k_strides[0] % VPL == 0 && v_strides[0] % VPL == 0;

    float qv[G][VPL];
    float acc[G][VPL];
    float m[G];
    float l[G];
    for (int j = 0; j < G; ++j) {
        const T* qp = q + b * q_strides[0] + (g * G + j) * q_strides[1];
        for (int i = 0; i < VPL; ++i) {
            qv[j][i] = static_cast<float>(qp[(wl * VPL + i) * q_strides[3]]) * sc;
            acc[j][i] = 0.0f;
        }
        m[j] = NEG_INF;
        l[j] = 0.0f;
    }
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    // uniform over the block: every lane reaches the shuffles; a key past the chunk or
    // masked adds nothing
    for (int base = start; base < end; base += NST * U) {
        // every load first, unconditional and in one straight line (rows past the chunk
        // read its last row and are dropped by ok[]): a load behind a branch, used
        // right after, waits out its latency before the next one is issued
        Vec kk[U];
        Vec vv[U];
        bool ok[U];
        if (vec) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int rc = min(base + st * U + u, end - 1);
                kk[u] = *reinterpret_cast<const Vec*>(kb + rc * k_strides[2] + wl * VPL);
                vv[u] = *reinterpret_cast<const Vec*>(vb + rc * v_strides[2] + wl * VPL);
            }
        } else {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int rc = min(base + st * U + u, end - 1);
                for (int i = 0; i < VPL; ++i) {
                    const int d = wl * VPL + i;
                    kk[u].v[i] = kb[rc * k_strides[2] + d * k_strides[3]];
                    vv[u].v[i] = vb[rc * v_strides[2] + d * v_strides[3]];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int r = base + st * U + u;
            bool live = r < end;
            if (HAS_MASK) {
                const int rc = min(r, end - 1);
                live = live & mask[b * mask_strides[0] + rc * mask_strides[3]];
            }
            ok[u] = live;
        }
#pragma unroll
        for (int j = 0; j < G; ++j) {
            float s[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                float d = 0.0f;
                for (int i = 0; i < VPL; ++i) {
                    d += qv[j][i] * static_cast<float>(kk[u].v[i]);
                }
                // xor offsets below L stay inside this key's L lanes
                for (int off = L / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffff, d, off);
                s[u] = ok[u] ? d : NEG_INF;
            }
            float big = m[j];
            for (int u = 0; u < U; ++u) big = fmaxf(big, s[u]);
            if (big == NEG_INF) continue;   // nothing seen yet by this stream
            const float corr = expf(m[j] - big);
            l[j] *= corr;
            for (int i = 0; i < VPL; ++i) acc[j][i] *= corr;
            for (int u = 0; u < U; ++u) {
                const float p = expf(s[u] - big);
                l[j] += p;
                for (int i = 0; i < VPL; ++i) {
                    acc[j][i] += p * static_cast<float>(vv[u].v[i]);
                }
            }
            m[j] = big;
        }
    }
"""

_BODY = _STREAMS + merge_streams("VPL")

_WRITE_OUT = """
        out[(b * n_q_heads + h) * D + d] = static_cast<T>(total > 0.0f ? o / total : 0.0f);
    }
"""


_INPUTS = ["q", "k", "v", "mask", "scale"]


@functools.cache
def _kernels():  # not gated: gpu only
    direct = mx.fast.cuda_kernel(
        name="batchlab_grouped_decode", input_names=_INPUTS, output_names=["out"],
        source=_BODY + _WRITE_OUT, header=NEG_INF_HEADER, ensure_row_contiguous=False)
    partial = mx.fast.cuda_kernel(
        name="batchlab_grouped_decode_partial", input_names=_INPUTS,
        output_names=["part_m", "part_l", "part_acc"],
        source=_BODY + WRITE_PARTIAL, header=NEG_INF_HEADER, ensure_row_contiguous=False)
    return direct, partial


def lanes_per_key(dim: int, itemsize: int) -> tuple[int, int]:  # not gated: gpu only
    """(lanes a key spans, dims a lane loads): 8-byte loads of 16-bit dims up to D 128,
    16-byte loads beyond that and for float32; (0, 0) where no split fills a warp."""
    vpl = 4 if itemsize == 4 or dim <= 128 else 8
    lanes = dim // vpl
    if dim % vpl or lanes < 1 or lanes > 32 or 32 % lanes:
        return 0, 0
    return lanes, vpl


def fits(queries: mx.array, keys: mx.array, values: mx.array, mask,  # not gated: gpu only
         sinks) -> bool:
    """Whether the kernel takes this call: one query per row over at most ``MAX_KEYS``
    keys (where MLX runs its one-pass kernel, which reads K and V once per query head),
    K and V of one head dim that splits over whole lanes, at most 8 query heads per KV
    head, no sinks, and no mask or a boolean one of one query row over exactly the
    served keys."""
    b, n_q, n, dim = queries.shape
    n_kv = keys.shape[1]
    if n != 1 or sinks is not None or keys.shape[-1] != dim or values.shape[-1] != dim:
        return False
    if keys.shape[2] > MAX_KEYS:
        return False
    if keys.dtype != queries.dtype or values.dtype != queries.dtype:
        return False
    lanes, _ = lanes_per_key(dim, queries.dtype.size)
    if not lanes or n_q % n_kv or n_q // n_kv > 8:
        return False
    if WARPS * (32 // lanes) * (n_q // n_kv) * dim > MAX_SHARED_FLOATS:
        return False
    if mask is None:
        return True
    return (isinstance(mask, mx.array) and mask.dtype == mx.bool_ and mask.ndim == 4
            and mask.shape[1] == 1 and mask.shape[2] == 1
            and mask.shape[-1] == keys.shape[2] and mask.shape[0] in (1, b))


def num_chunks(rows: int, kv_heads: int, width: int) -> int:  # not gated: gpu only
    """Chunks of keys per (row, KV head): enough blocks to keep the loads in flight, no
    chunk under 256 keys (one chunk: no second launch, one op less for the host)."""
    want = math.ceil(TARGET_BLOCKS / max(1, rows * kv_heads))
    return max(1, min(want, math.ceil(width / MIN_CHUNK)))


def grouped_decode_attention(  # not gated: gpu only
        queries: mx.array, keys: mx.array, values: mx.array, scale: float,
        mask) -> mx.array:
    """softmax(q . K^T * scale, masked) . V for one query per row; ``keys`` / ``values``
    ``(B, H_kv, N, D)`` as the cache served them (a view of its buffer is fine)."""
    b, n_q, _, dim = queries.shape
    n_kv, width = keys.shape[1], keys.shape[2]
    _, vpl = lanes_per_key(dim, queries.dtype.size)
    n_chunks = num_chunks(b, n_kv, width)
    has_mask = mask is not None
    if has_mask and mask.shape[0] != b:
        mask = mx.broadcast_to(mask, (b, 1, 1, width))
    direct, partial = _kernels()
    inputs = [queries, keys, values, mask if has_mask else no_mask(), scale_array(scale)]
    template = [("T", queries.dtype), ("D", dim), ("VPL", vpl), ("G", n_q // n_kv),
                ("U", UNROLL), ("NW", WARPS), ("HAS_MASK", has_mask)]
    grid = (32 * WARPS * n_chunks, n_kv, b)
    if n_chunks == 1:
        return direct(inputs=inputs, template=template, grid=grid,
                      threadgroup=(32 * WARPS, 1, 1), output_shapes=[(b, n_q, 1, dim)],
                      output_dtypes=[queries.dtype])[0]
    part_m, part_l, part_acc = partial(
        inputs=inputs, template=template, grid=grid, threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(b, n_q, n_chunks), (b, n_q, n_chunks), (b, n_q, n_chunks, dim)],
        output_dtypes=[mx.float32, mx.float32, mx.float32])
    return combine_chunks(part_m, part_l, part_acc, queries.dtype)

"""The invariant path's decode row kernel, reading each KV head once for its query group.

``row_attention.py``'s kernel runs a block per (row, query head): with grouped-query
attention (llama-3.1-8b: 32 query heads over 8 KV heads) every KV head's keys and values
are read once per query head of its group, 4x the cache's bytes. This kernel runs a
block per (row, KV head) and does, for each of the group's ``G`` query heads, exactly the
arithmetic of the per-head kernel in the same order: warp ``w`` takes the row's keys
``w, w + 4, ...`` with an online softmax per query head, and the warps are combined in
order. Only the loads are shared, so its output equals the per-head kernel's bit for
bit: on the H200 (``tools/h200/row_gqa_probe.py``, random bf16 data at llama-3.2-1b's
and llama-3.1-8b's shapes, B 1 / 64 / 256, padded query rows included) every output was
equal, at 0.47-0.95x the per-head kernel's time (reports/bench/cuda-sm90/issue28-*/).
It runs where its warp partials fit the shared memory (``fits``), else the per-head one.
"""

from __future__ import annotations

import functools
import os

import mlx.core as mx

# the per-head kernel's warps per block (``row_attention.WARPS``; a unit test holds them
# equal): warp w takes keys w, w + 4, ..., part of the reduction order both share
WARPS = 4
MAX_SHARED_FLOATS = 8192  # warp partials: NW x G x MAXD floats (32 KB) at most
# Keys (and values) a warp loads before their arithmetic. 1 is the kernel the H200 gate
# validated; more keeps every float operation and its order (only where the loads sit
# moves), for the latency of one load at a time: not yet timed or run on the H200
# (tools/h200/row_gqa_probe.py times it), so opt-in (BATCHLAB_ROW_ATTENTION_UNROLL, read
# once at import into KEYS_AHEAD, as the other kernel switches are: not per layer call).
UNROLL_ENV = "BATCHLAB_ROW_ATTENTION_UNROLL"
UNROLL_CHOICES = (1, 2, 4, 8)

_SOURCE = """
    const int b = blockIdx.z;
    const int g = blockIdx.y;  // the KV head; its query heads are g * G .. g * G + G - 1
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_q_heads = q_shape[1];
    const int dv = v_shape[3];
    if (b >= k_shape[0]) {  // a padding row of the decode batch: zeros, no keys read
        if (warp == 0) {
            for (int j = 0; j < G; ++j) {
                T* op = out + (b * n_q_heads + g * G + j) * dv;
                for (int d = lane; d < dv; d += 32) op[d] = static_cast<T>(0.0f);
            }
        }
        return;
    }
    const int width = k_shape[2];
    const int dk = k_shape[3];
    const int first = first_keys[b];
    const int n = width - first;
    const float sc = scale[0];
    constexpr int PER_LANE = MAXD / 32;

    float qv[G][PER_LANE];
    float acc[G][PER_LANE];
    float m[G];
    float l[G];
    for (int j = 0; j < G; ++j) {
        const T* qp = q + b * q_strides[0] + (g * G + j) * q_strides[1];
        for (int i = 0; i < PER_LANE; ++i) {
            int d = lane + 32 * i;
            qv[j][i] = d < dk ? static_cast<float>(qp[d * q_strides[3]]) * sc : 0.0f;
            acc[j][i] = 0.0f;
        }
        m[j] = NEG_INF;
        l[j] = 0.0f;
    }
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    // U keys and values loaded before their arithmetic (U = 1: one at a time): a warp
    // still takes its keys w, w + NW, ... in order, so the float operations are the same
    for (int r0 = warp; r0 < n; r0 += NW * U) {
        float kv[U][PER_LANE];
        float vv[U][PER_LANE];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int r = min(r0 + u * NW, n - 1);  // past the row's keys: unused
            const T* kp = kb + (first + r) * k_strides[2];
            const T* vp = vb + (first + r) * v_strides[2];
            for (int i = 0; i < PER_LANE; ++i) {
                int d = lane + 32 * i;
                kv[u][i] = d < dk ? static_cast<float>(kp[d * k_strides[3]]) : 0.0f;
                vv[u][i] = d < dv ? static_cast<float>(vp[d * v_strides[3]]) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (r0 + u * NW >= n) break;  // uniform over the warp
            for (int j = 0; j < G; ++j) {
                float s = 0.0f;
                for (int i = 0; i < PER_LANE; ++i) {
                    int d = lane + 32 * i;
                    if (d < dk) s += qv[j][i] * kv[u][i];
                }
                for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
                float m_new = fmaxf(m[j], s);
                float corr = expf(m[j] - m_new);
                float p = expf(s - m_new);
                l[j] = l[j] * corr + p;
                for (int i = 0; i < PER_LANE; ++i) {
                    int d = lane + 32 * i;
                    if (d < dv) acc[j][i] = acc[j][i] * corr + p * vv[u][i];
                }
                m[j] = m_new;
            }
        }
    }
    __shared__ float warp_m[NW][G];
    __shared__ float warp_l[NW][G];
    __shared__ float warp_acc[NW][G][MAXD];
    for (int j = 0; j < G; ++j) {
        if (lane == 0) {
            warp_m[warp][j] = m[j];
            warp_l[warp][j] = l[j];
        }
        for (int i = 0; i < PER_LANE; ++i) warp_acc[warp][j][lane + 32 * i] = acc[j][i];
    }
    __syncthreads();
    for (int j = warp; j < G; j += NW) {  // warp w combines query heads w, w + NW, ...
        const int h = g * G + j;
        float big = HAS_SINKS ? static_cast<float>(sinks[h]) : NEG_INF;
        for (int w = 0; w < NW; ++w) big = fmaxf(big, warp_m[w][j]);
        float total = HAS_SINKS ? expf(static_cast<float>(sinks[h]) - big) : 0.0f;
        float outv[PER_LANE];
        for (int i = 0; i < PER_LANE; ++i) outv[i] = 0.0f;
        for (int w = 0; w < NW; ++w) {
            float c = expf(warp_m[w][j] - big);
            total += warp_l[w][j] * c;
            for (int i = 0; i < PER_LANE; ++i) outv[i] += warp_acc[w][j][lane + 32 * i] * c;
        }
        T* op = out + (b * n_q_heads + h) * dv;
        for (int i = 0; i < PER_LANE; ++i) {
            int d = lane + 32 * i;
            if (d < dv) op[d] = static_cast<T>(outv[i] / total);
        }
    }
"""

_HEADER = "#define NEG_INF (-__int_as_float(0x7f800000))\n"


def fits(n_q_heads: int, n_kv_heads: int, maxd: int) -> bool:  # not gated: gpu only
    """Whether a (row, KV head) block's warp partials fit the shared memory bound."""
    group = n_q_heads // n_kv_heads
    return n_q_heads % n_kv_heads == 0 and group > 1 and WARPS * group * maxd <= MAX_SHARED_FLOATS


@functools.cache
def _kernel():  # not gated: gpu only
    return mx.fast.cuda_kernel(
        name="batchlab_row_attention_gqa",
        input_names=["q", "k", "v", "first_keys", "scale", "sinks"], output_names=["out"],
        source=_SOURCE, header=_HEADER, ensure_row_contiguous=False)


def unroll() -> int:
    """``BATCHLAB_ROW_ATTENTION_UNROLL`` (1, 2, 4 or 8; default 1), checked."""
    name = os.environ.get(UNROLL_ENV, "").strip() or "1"
    if not name.isdigit() or int(name) not in UNROLL_CHOICES:  # not gated: gpu only
        raise ValueError(f"{UNROLL_ENV}={name!r}: one of {', '.join(map(str, UNROLL_CHOICES))}")
    return int(name)


KEYS_AHEAD = unroll()


def gqa_row_attention(inputs: list, dtype, n_rows: int, n_q_heads: int, n_kv_heads: int,
                      dv: int, maxd: int, with_sinks: bool,
                      keys_ahead: int | None = None) -> mx.array:  # not gated: gpu only
    """The kernel over ``row_attention``'s inputs (q, k, v, first_keys, scale, sinks);
    ``keys_ahead`` a warp loads (default ``KEYS_AHEAD``), for the probes."""
    return _kernel()(
        inputs=inputs,
        template=[("T", dtype), ("MAXD", maxd), ("NW", WARPS), ("G", n_q_heads // n_kv_heads),
                  ("HAS_SINKS", with_sinks), ("U", keys_ahead or KEYS_AHEAD)],
        grid=(32 * WARPS, n_kv_heads, n_rows), threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(n_rows, n_q_heads, 1, dv)], output_dtypes=[dtype])[0]

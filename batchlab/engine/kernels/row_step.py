"""One decode row's whole forward, every layer, as one persistent kernel (CUDA): ``fast``'s
step of one row.

A decode step of one row is bound by the host on the H200, and a custom kernel costs the
host about what two MLX ops cost (reports/bench/cuda-sm90/issue28-chain/): folding a
layer into four kernels (``row_chain``) left the step where it was. Here the host makes
one call for all the layers. The kernel's blocks all stay resident (one per SM) and meet
at a grid barrier between the phases of a layer:

1. RMS norm of the hidden state, then the q, k and v products (each warp two rows); v
   goes into the cache at the write column;
2. attention: a warp per query head and slice of the keys (``MAX_SPLITS`` at most), its
   query and the new key normalised (qwen3's head norms) and rotated by RoPE as it loads
   them; the new key goes into the cache; each warp leaves its softmax partials;
3. every block merges the partials into the attention's output, then o_proj and the
   residual add (each warp two rows);
4. RMS norm, gate and up, ``silu(gate) * up``;
5. down_proj and the residual add.

The cache is written in place: its key and value buffers are inputs, and the column the
step writes is one no view the engine holds covers yet (``BatchKV.room_for_one``). The
buffers must be the cache's own row-contiguous arrays (``persistent_decode`` makes sure):
MLX would hand a kernel a copy of a strided view, and the write would be lost.

Every product, norm, RoPE and residual rounds to the model's dtype where MLX's op rounds;
the sums' order and the attention's float path are the kernel's own, so ``fast`` on a GPU
stays judged by KL against the oracle.

The weights do not depend on the step's data: each warp asks L2 for the rows of its next
round, and before a barrier for its first round after it (``PREFETCH``), so their loads
may overlap the wait (its measured effect on the H200, within the noise:
reports/bench/cuda-sm90/issue28-persistent/).

The grid barrier needs every block resident at once: a block (256 threads by default, at
most 48 KiB of shared memory, at most 136 registers a thread as ptxas compiled it, 100-126
at 16-bit: ``tools/h200/row_step_compile_check.py``) fits an SM, and the launch takes one
block per SM (``blocks``).
"""

from __future__ import annotations

import ctypes
import functools
import os

import mlx.core as mx

from batchlab.engine.kernels.row_chain import HEADER as CHAIN_HEADER
from batchlab.engine.kernels.row_chain import LOADS

WARPS = 8  # warps a block
# a probe's switch: warps a block (the products' units spread over more warps; the
# same sums where a norm's input is at most one 16-byte chunk a thread of 8 warps). At
# 16, a block takes every register of an SM at 128 a thread: float32 qwen3's kernel
# (136) cannot launch (tools/h200/row_step_compile_check.py).
WARPS_ENV = "BATCHLAB_ROW_STEP_WARPS"
MAX_SPLITS = 32  # slices of the keys a query head's attention is split into, at most
KEYS_A_SPLIT = 64  # keys a slice aims for: fewer slices below 64 * MAX_SPLITS keys
# a probe's switch: the keys a slice aims for (another float order where it moves the
# slices' bounds: judged by KL, as the kernel's attention always is)
KEYS_A_SPLIT_ENV = "BATCHLAB_ROW_STEP_KEYS_A_SPLIT"
# a probe's switch: 1 merges the attention's slices into its output slice by slice, a
# thread's elements inner (the same sums), where 0 walks each element's slices in turn
MERGE_ENV = "BATCHLAB_ROW_STEP_MERGE"
MERGE = 0
SHARED_BYTES = 48 * 1024  # a block's static shared memory, at most
BLOCKS_ENV = "BATCHLAB_ROW_STEP_BLOCKS"
SMS = 132  # the H200's SMs, where the driver cannot be asked (sm_count)
BLOCKS_PER_SM = 1  # (BLOCKS_ENV may ask for 2 an SM where the registers allow: blocks())
# a probe's switch, to time the parts: a mask of the phases whose work is skipped (bits
# 0-4, phases 1-5) and, bit 5, the grid barriers (wrong results: for timing only)
SKIP_ENV = "BATCHLAB_ROW_STEP_SKIP"
BARRIER_ENV = "BATCHLAB_ROW_STEP_BARRIER"  # a probe's: 0 fences + atomic, 1 release / acquire
BARRIER_KIND = 0
PREFETCH_ENV = "BATCHLAB_ROW_STEP_PREFETCH"  # a probe's: 0 no L2 prefetch of the weights
PREFETCH = 1
# The products through stream_pairs, this many 16-byte chunks a row a batch (loads in
# flight across a warp's units), or, 0, two_dots (the same bits): a probe's switch. 8
# spills at bf16 (tools/h200/row_step_compile_check.py). Streamed, fast's step gained on
# qwen3-0.6b only while the values loaded key by key, and lost beside VALUES_AHEAD
# (reports/bench/cuda-sm90/issue28-stream/, issue28-wide/).
STREAM_ENV = "BATCHLAB_ROW_STEP_STREAM"
STREAM = 0
# the attention's values, this many keys' loaded ahead of their arithmetic (0: key by key,
# as the compiler unrolls it; the same sums either way). 8 by default: the step's time
# at 4, 8, 16 and 32 and without: reports/bench/cuda-sm90/issue28-stream/
VALUES_AHEAD_ENV = "BATCHLAB_ROW_STEP_VALUES_AHEAD"
VALUES_AHEAD = 8
BARRIER_WORDS = 16384  # the barrier's buffer: 64 KiB, a device allocation (one word used)

# per layer, in order; qwen3 adds its head norms before the cache
LAYER_INPUTS = ("in_norm", "wq", "wk", "wv", "wo", "post_norm", "wg", "wu", "wd")
HEAD_NORM_INPUTS = ("q_norm", "k_norm")
CACHE_INPUTS = ("keys", "values")
INPUTS = ("h_in", "meta", "barrier", "consts", "inv_freq")  # then each layer's
OUTPUTS = ("h", "qkv", "act", "part")
INPUT_TYPES = {"meta": "int32_t", "barrier": "uint32_t", "consts": "float",
               "inv_freq": "float"}

HEADER = CHAIN_HEADER + """
// A value another block wrote in this launch, read through L2 (ld.global.cg).
template <typename T>
__device__ __forceinline__ float load_fresh(const T* p) {
    if constexpr (sizeof(T) == 2) {
        unsigned short u;
        asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(u) : "l"(p) : "memory");
        return static_cast<float>(*reinterpret_cast<const T*>(&u));
    } else {
        float r;
        asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(r) : "l"(p) : "memory");
        return r;
    }
}

// Ask L2 for `bytes` from p (what the warp reads next), a 128-byte line a lane: the
// weights do not depend on the step's data, so their loads can start before a barrier
// and hide behind it. Call from a whole warp.
__device__ __forceinline__ void prefetch_l2(const void* p, long long bytes) {
    const char* c = static_cast<const char*>(p);
    for (long long off = (threadIdx.x & 31) * 128; off < bytes; off += 32 * 128) {
        asm volatile("prefetch.global.L2 [%0];" : : "l"(c + off));
    }
}

// The warp's units (pairs of weight rows of K values, ``rows(u, r0, r1)``) from ``first``
// in steps of ``step``, each pair's two dot products with x (shared memory) handed to
// ``emit(u, d0, d1)`` (every lane); ``ahead(u)`` as a unit's loads start (the L2
// prefetch the two_dots loops make at the same unit). The next batch's loads (LD 16-byte
// chunks a row, of this unit or the warp's next) are issued before the current batch's
// arithmetic, so a warp's loads stay in flight through its arithmetic and from one unit
// to the next: written as two_dots, ptxas interleaves each load with its FMAs (2-3 loads
// in flight a warp). Each sum runs over its chunks in ascending order, as
// two_dots<T, K, 1, LD> sums it: the same bits.
template <typename T, int K, int LD, typename Rows, typename Emit, typename Ahead>
__device__ __forceinline__ void stream_pairs(int first, int units, int step, const T* x,
                                             Rows rows, Emit emit, Ahead ahead) {
    constexpr int NCH = K / (16 / sizeof(T));
    constexpr int ROUNDS = NCH / 32;
    static_assert(NCH % 32 == 0 && ROUNDS % LD == 0, "whole batches");
    constexpr int NB = ROUNDS / LD;
    const int lane = threadIdx.x & 31;
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    if (first >= units) return;
    Vec16<T> c0[LD], c1[LD];
    const T* r0;
    const T* r1;
    ahead(first);
    rows(first, r0, r1);
#pragma unroll
    for (int i = 0; i < LD; ++i) {
        c0[i] = load_weight(reinterpret_cast<const Vec16<T>*>(r0) + lane + 32 * i);
        c1[i] = load_weight(reinterpret_cast<const Vec16<T>*>(r1) + lane + 32 * i);
    }
    int u = first;
    int b = 0;
    float s0 = 0.0f;
    float s1 = 0.0f;
    while (true) {
        int nu = u;
        int nb = b + 1;
        if (nb == NB) {
            nb = 0;
            nu += step;
        }
        const bool more = nu < units;
        Vec16<T> n0[LD], n1[LD];
        if (more) {
            if (nb == 0) ahead(nu);
            rows(nu, r0, r1);
#pragma unroll
            for (int i = 0; i < LD; ++i) {
                const int c = lane + 32 * (nb * LD + i);
                n0[i] = load_weight(reinterpret_cast<const Vec16<T>*>(r0) + c);
                n1[i] = load_weight(reinterpret_cast<const Vec16<T>*>(r1) + c);
            }
        }
#pragma unroll
        for (int i = 0; i < LD; ++i) {
            fma_chunk<T>(c0[i], c1[i], xv[lane + 32 * (b * LD + i)], s0, s1);
        }
        if (b == NB - 1) {
            emit(u, warp_sum(s0), warp_sum(s1));
            s0 = 0.0f;
            s1 = 0.0f;
        }
        if (!more) break;
#pragma unroll
        for (int i = 0; i < LD; ++i) {
            c0[i] = n0[i];
            c1[i] = n1[i];
        }
        u = nu;
        b = nb;
    }
}

// stream_pairs' batch for rows of K values: LD, or the largest of 4, 2, 1 that makes
// whole batches; 0 where a row is not whole rounds of 32 chunks (two_dots then)
template <typename T, int K, int LD>
__host__ __device__ constexpr int stream_batch() {
    constexpr int NCH = K / (16 / sizeof(T));
    constexpr int ROUNDS = NCH / 32;
    if (NCH % 32 != 0 || ROUNDS == 0) return 0;
    return ROUNDS % LD == 0 ? LD : (ROUNDS % 4 == 0 ? 4 : (ROUNDS % 2 == 0 ? 2 : 1));
}

// A phase's products: the warp's units from ``first`` in steps of ``step``, through
// stream_pairs (SB > 0) or, unit by unit, ``ahead(u)`` then two_dots<T, KR, 1, LD> and
// ``emit`` (the same bits either way).
template <typename T, int KR, int SB, int LD, typename Rows, typename Emit, typename Ahead>
__device__ __forceinline__ void products(int first, int units, int step, const T* x,
                                         Rows rows, Emit emit, Ahead ahead) {
    if constexpr (SB > 0) {
        stream_pairs<T, KR, SB>(first, units, step, x, rows, emit, ahead);
    } else {
        for (int u = first; u < units; u += step) {
            ahead(u);
            const T* r0;
            const T* r1;
            rows(u, r0, r1);
            float d0, d1;
            two_dots<T, KR, 1, LD>(r0, r1, x, 0, d0, d1);
            emit(u, d0, d1);
        }
    }
}

// Row r of q, k and v stacked (QD rows of wq, then KD of wk, then KD of wv).
template <typename T, int K, int QD, int KD>
__device__ __forceinline__ const T* qkv_row(const T* wq, const T* wk, const T* wv, int r) {
    if (r < QD) return wq + (long long)r * K;
    if (r < QD + KD) return wk + (long long)(r - QD) * K;
    return wv + (long long)(r - QD - KD) * K;
}

// Every block waits here until all have arrived; what a block wrote before it, every
// block reads after it. A word flips: each block adds 1, one adds 2^31 - (n - 1), so the
// word's top bit flips when the last of n arrives and its low bits come back to where
// they were, ready for the next barrier and the next launch (cooperative groups' grid
// sync does the same). The waits poll with plain volatile loads.
// BAR = 1 (a probe's setting): the word's add a release, its polls acquires. (Arrivals
// in groups of blocks, each group's leader arriving at the word, were slower on the H200:
// reports/bench/cuda-sm90/issue28-persistent/, nineteenth round.)
template <int BAR>
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (BAR == 1 && threadIdx.x == 0) {
        // the same word, its add a release and its polls acquires (CUTLASS's generic
        // barrier): no full fence on either side
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned old, now;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add)
                     : "memory");
        do {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");
        } while (((old ^ now) & 0x80000000u) == 0);
    } else if (threadIdx.x == 0) {
        volatile unsigned* top = bar;
        __threadfence();
        const unsigned old = atomicAdd(bar, blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1)
                                                             : 1u);
        while (((old ^ *top) & 0x80000000u) == 0) {
        }
        __threadfence();
    }
    __syncthreads();
}

// x (N elements another block may have written) normalised as MLX's rms_norm rounds it,
// w * T(x * rsqrt(mean(x^2) + eps)), into shared memory. Call from every thread.
template <typename T, int N>
__device__ __forceinline__ void stage_norm_fresh(const T* x, const T* nw, float eps, T* xs,
                                                 float* red) {
    constexpr int VE = 16 / sizeof(T);
    constexpr int NCH = N / VE;
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    const Vec16<T>* wv = reinterpret_cast<const Vec16<T>*>(nw);
    Vec16<T>* sv = reinterpret_cast<Vec16<T>*>(xs);
    const float rs = rms_factor<T, N, true>(x, eps, red);
    for (int c = threadIdx.x; c < NCH; c += blockDim.x) {
        Vec16<T> v = load_input<true>(xv + c);
        const Vec16<T> w = wv[c];
#pragma unroll
        for (int e = 0; e < VE; ++e) {
            const T y = static_cast<T>(static_cast<float>(v.v[e]) * rs);
            v.v[e] = static_cast<T>(static_cast<float>(w.v[e]) * static_cast<float>(y));
        }
        sv[c] = v;
    }
    __syncthreads();
}

// x (N elements another block may have written) into shared memory as it is.
template <typename T, int N>
__device__ __forceinline__ void stage_fresh(const T* x, T* xs) {
    constexpr int NCH = N / (16 / sizeof(T));
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    Vec16<T>* sv = reinterpret_cast<Vec16<T>*>(xs);
    for (int c = threadIdx.x; c < NCH; c += blockDim.x) sv[c] = load_input<true>(xv + c);
    __syncthreads();
}

// One head of q or k (raw products in `raw`), lane l holding dims l + 32 j: normalised by
// its head norm (qwen3) as MLX's rms_norm rounds it, then rotated as MLX's non-traditional
// RoPE rounds it. Call from a whole warp.
template <typename T, int D, bool QKN>
__device__ __forceinline__ void load_head(const T* raw, const T* nw, float eps,
                                          const float* cs, const float* sn, float* out) {
    constexpr int VPT = D / 32;
    const int lane = threadIdx.x & 31;
    float x[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) x[j] = load_fresh(raw + lane + 32 * j);
    if (QKN) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < VPT; ++j) ss += x[j] * x[j];
        const float rs = rsqrtf(warp_sum(ss) / D + eps);
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const T y = static_cast<T>(x[j] * rs);
            x[j] = static_cast<float>(static_cast<T>(
                static_cast<float>(nw[lane + 32 * j]) * static_cast<float>(y)));
        }
    }
#pragma unroll
    for (int j = 0; j < VPT / 2; ++j) {
        const int i = lane + 32 * j;
        const float x1 = x[j];
        const float x2 = x[j + VPT / 2];
        out[j] = static_cast<float>(static_cast<T>(x1 * cs[i] - x2 * sn[i]));
        out[j + VPT / 2] = static_cast<float>(static_cast<T>(x1 * sn[i] + x2 * cs[i]));
    }
}
"""

# Template constants: T, K (hidden), D (head dim), NQ, NKV, INTER, L (layers), NP
# (inputs a layer), QKN (head norms), MAXS, KS (keys a slice aims for), LD, SKIP, BAR,
# PF, STREAM, VA, W (warps a block), MG (the merge's order of loads). ``{table}`` is
# filled by ``source``.
BODY = """
    const float NEG_INF = __int_as_float(0xff800000);
    constexpr int HALF = D / 2;
    constexpr int VPT = D / 32;
    constexpr int VE = 16 / sizeof(T);
    constexpr int QD = NQ * D;
    constexpr int NQKV = (NQ + 2 * NKV) * D;
    constexpr int KD = NKV * D;
    constexpr int GROUP = NQ / NKV;
    // STREAM > 0: the products through stream_pairs, STREAM chunks a row a batch (0
    // where a row's chunks are not whole batches: two_dots, the same bits either way)
    constexpr int SB_K = STREAM ? stream_batch<T, K, STREAM>() : 0;
    constexpr int SB_QD = STREAM ? stream_batch<T, QD, STREAM>() : 0;
    constexpr int SB_INTER = STREAM ? stream_batch<T, INTER, STREAM>() : 0;
    constexpr int XS = K > QD ? (K > INTER ? K : INTER) : (QD > INTER ? QD : INTER);
    __shared__ alignas(16) T xs[XS];
    __shared__ float red[32];
    __shared__ float qs[W][D];
    __shared__ float cs[HALF];
    __shared__ float sn[HALF];
    __shared__ float wts[NQ * MAXS];
    __shared__ const void* tab[L][NP];
    if (threadIdx.x == 0) {
{table}
    }
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int gwarp = blockIdx.x * W + warp;
    const int nwarps = gridDim.x * W;
    const int idx = meta[0];    // the write column
    const int start = meta[1];  // the row's first key (its left padding)
    const int pos = meta[2];    // the new token's RoPE position
    const long long cap = meta[3];  // columns of the key and value buffers
    const int cached = idx - start;
    const int most = (nwarps / NQ) < MAXS ? (nwarps / NQ) : MAXS;
    int splits = (cached + KS - 1) / KS;
    splits = splits < 1 ? 1 : (splits > most ? most : splits);
    const int chunk = (cached + splits - 1) / splits;
    const float eps_in = consts[0];
    const float eps_post = consts[1];
    const float eps_qk = consts[2];
    const float scale = consts[3];
    unsigned* bar = const_cast<unsigned*>(barrier);
    for (int i = threadIdx.x; i < HALF; i += blockDim.x) {
        const float theta = static_cast<float>(pos) * inv_freq[i];
        cs[i] = cosf(theta);
        sn[i] = sinf(theta);
    }
    __syncthreads();
    // PF: each warp asks L2 for the weights of its next round (and, before a barrier, of
    // its first round after it); the order of every sum stays as it is
    // q / k / v's rows of round u, from a layer's pointer table
    auto prefetch_qkv = [&](const T* const* pl, int u) {
        if (PF && u < NQKV / 2) {
            prefetch_l2(qkv_row<T, K, QD, KD>(pl[1], pl[2], pl[3], 2 * u), 2LL * K * sizeof(T));
        }
    };
    prefetch_qkv(reinterpret_cast<const T* const*>(tab[0]), gwarp);
    for (int layer = 0; layer < L; ++layer) {
        const T* const* p = reinterpret_cast<const T* const*>(tab[layer]);
        const T* in_norm = p[0];
        const T* wq = p[1];
        const T* wk = p[2];
        const T* wv = p[3];
        const T* wo = p[4];
        const T* post_norm = p[5];
        const T* wg = p[6];
        const T* wu = p[7];
        const T* wd = p[8];
        const T* q_norm = QKN ? p[9] : nullptr;
        const T* k_norm = QKN ? p[10] : nullptr;
        T* kc = const_cast<T*>(p[NP - 2]);
        T* vc = const_cast<T*>(p[NP - 1]);
        const T* hsrc = layer == 0 ? h_in : h;
        auto prefetch_gate_up = [&](int j) {  // gate's and up's row j
            if (PF && j < INTER) {
                prefetch_l2(wg + (long long)j * K, K * sizeof(T));
                prefetch_l2(wu + (long long)j * K, K * sizeof(T));
            }
        };

        // 1. norm, q / k / v; v into the cache
        stage_norm_fresh<T, K>(hsrc, in_norm, eps_in, xs, red);
        auto qkv_rows = [&](int u, const T*& r0, const T*& r1) {  // rows 2u, 2u + 1
            r0 = qkv_row<T, K, QD, KD>(wq, wk, wv, 2 * u);
            r1 = r0 + K;  // QD and KD are even: a unit's rows share their matrix
        };
        auto qkv_emit = [&](int u, float d0, float d1) {
            const int r0 = 2 * u;
            if (lane == 0) {
                const T t0 = static_cast<T>(d0);
                const T t1 = static_cast<T>(d1);
                qkv[r0] = t0;
                qkv[r0 + 1] = t1;
                if (r0 >= QD + NKV * D) {  // v
                    const int rr = r0 - QD - NKV * D;
                    T* dst = vc + ((long long)(rr / D) * cap + idx) * D + rr % D;
                    dst[0] = t0;
                    dst[1] = t1;
                }
            }
        };
        auto qkv_ahead = [&](int u) { prefetch_qkv(p, u + nwarps); };
        if (!(SKIP & 1)) {
            products<T, K, SB_K, LD>(gwarp, NQKV / 2, nwarps, xs, qkv_rows, qkv_emit, qkv_ahead);
        }
        if (PF && gwarp < NQ * splits) {  // this warp's keys and values, then o_proj's rows
            const int kvh = gwarp / splits / GROUP;
            const int first = gwarp % splits * chunk;
            const int n = (first + chunk < cached ? first + chunk : cached) - first;
            const long long at = ((long long)kvh * cap + start + first) * D;
            if (n > 0) {
                prefetch_l2(kc + at, (long long)n * D * sizeof(T));
                prefetch_l2(vc + at, (long long)n * D * sizeof(T));
            }
        }
        if (PF && gwarp < K / 2) prefetch_l2(wo + 2LL * gwarp * QD, 2LL * QD * sizeof(T));
        if (!(SKIP & 32)) grid_barrier<BAR>(bar);

        // 2. attention: a warp per (query head, slice of the keys)
        for (int u = gwarp; !(SKIP & 2) && u < NQ * splits; u += nwarps) {
            const int qh = u / splits;
            const int sp = u % splits;
            const int kvh = qh / GROUP;
            float q[VPT];
            float kn[VPT];
            load_head<T, D, QKN>(qkv + qh * D, q_norm, eps_qk, cs, sn, q);
            load_head<T, D, QKN>(qkv + QD + kvh * D, k_norm, eps_qk, cs, sn, kn);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                qs[warp][lane + 32 * j] = scale * q[j];
            }
            __syncwarp();
            if (sp == 0 && qh % GROUP == 0) {  // the new key, once per KV head
                T* dst = kc + ((long long)kvh * cap + idx) * D;
#pragma unroll
                for (int j = 0; j < VPT; ++j) dst[lane + 32 * j] = static_cast<T>(kn[j]);
            }
            const T* kb = kc + ((long long)kvh * cap + start) * D;
            const T* vb = vc + ((long long)kvh * cap + start) * D;
            float m = NEG_INF;
            float lsum = 0.0f;
            float acc[VPT];
#pragma unroll
            for (int j = 0; j < VPT; ++j) acc[j] = 0.0f;
            const int first = sp * chunk;
            const int end = first + chunk < cached ? first + chunk : cached;
            for (int c0 = first; c0 < end; c0 += 32) {
                const int key = c0 + lane;
                float s = NEG_INF;
                if (key < end) {
                    const Vec16<T>* kr = reinterpret_cast<const Vec16<T>*>(kb + (long long)key * D);
                    s = 0.0f;
#pragma unroll
                    for (int c = 0; c < D / VE; ++c) {
                        const Vec16<T> kv = load_weight(kr + c);
#pragma unroll
                        for (int e = 0; e < VE; ++e) {
                            s = fmaf(static_cast<float>(kv.v[e]), qs[warp][c * VE + e], s);
                        }
                    }
                }
                const float mn = fmaxf(m, warp_max(s));
                const float pr = key < end ? expf(s - mn) : 0.0f;
                const float alpha = expf(m - mn);
                lsum = lsum * alpha + warp_sum(pr);
#pragma unroll
                for (int j = 0; j < VPT; ++j) acc[j] *= alpha;
                const int n = end - c0 < 32 ? end - c0 : 32;
                int jj = 0;
                // VA: VA keys' values loaded before their arithmetic, so their loads are
                // in flight together; each acc[j] still sums the keys in ascending order
                for (; VA && jj + VA <= n; jj += VA) {
                    float vv[VA ? VA : 1][VPT];
#pragma unroll
                    for (int k = 0; k < VA; ++k) {
                        const T* vr = vb + (long long)(c0 + jj + k) * D;
#pragma unroll
                        for (int j = 0; j < VPT; ++j) {
                            vv[k][j] = static_cast<float>(vr[lane + 32 * j]);
                        }
                    }
#pragma unroll
                    for (int k = 0; k < VA; ++k) {
                        const float pj = __shfl_sync(0xffffffffu, pr, jj + k);
#pragma unroll
                        for (int j = 0; j < VPT; ++j) acc[j] = fmaf(pj, vv[k][j], acc[j]);
                    }
                }
                for (; jj < n; ++jj) {
                    const float pj = __shfl_sync(0xffffffffu, pr, jj);
                    const T* vr = vb + (long long)(c0 + jj) * D;
#pragma unroll
                    for (int j = 0; j < VPT; ++j) {
                        acc[j] = fmaf(pj, static_cast<float>(vr[lane + 32 * j]), acc[j]);
                    }
                }
                m = mn;
            }
            if (sp == splits - 1) {  // the new key and value
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < VPT; ++j) s = fmaf(qs[warp][lane + 32 * j], kn[j], s);
                s = warp_sum(s);
                const float mn = fmaxf(m, s);
                const float alpha = expf(m - mn);
                const float pr = expf(s - mn);
                lsum = lsum * alpha + pr;
                const T* vnew = qkv + QD + (NKV + kvh) * D;
#pragma unroll
                for (int j = 0; j < VPT; ++j) {
                    acc[j] = acc[j] * alpha + pr * load_fresh(vnew + lane + 32 * j);
                }
                m = mn;
            }
            float* out = part + ((long long)qh * MAXS + sp) * (D + 2);
#pragma unroll
            for (int j = 0; j < VPT; ++j) out[2 + lane + 32 * j] = acc[j];
            if (lane == 0) {
                out[0] = m;
                out[1] = lsum;
            }
            __syncwarp();
        }
        prefetch_gate_up(gwarp);  // gate and up's first round
        if (!(SKIP & 32)) grid_barrier<BAR>(bar);

        // 3. the partials merged into the attention's output, then o_proj + residual
        // (the partials through __ldcg, L2 as load_fresh, but loads the compiler may issue
        // together: the sums' order is the loops')
        for (int t = threadIdx.x; t < NQ; t += blockDim.x) {
            const float* pt = part + (long long)t * MAXS * (D + 2);
            float mx_ = NEG_INF;
#pragma unroll 4
            for (int s = 0; s < splits; ++s) mx_ = fmaxf(mx_, __ldcg(pt + s * (D + 2)));
            float total = 0.0f;
#pragma unroll 4
            for (int s = 0; s < splits; ++s) {
                const float e = expf(__ldcg(pt + s * (D + 2)) - mx_);
                wts[t * MAXS + s] = e;
                total += __ldcg(pt + s * (D + 2) + 1) * e;
            }
            for (int s = 0; s < splits; ++s) wts[t * MAXS + s] /= total;
        }
        __syncthreads();
        constexpr int TH = W * 32;
        constexpr int PER = (QD + TH - 1) / TH;  // elements a thread
        if (MG) {
            // the slices outer, a thread's elements inner: its loads of every element for
            // several slices in flight together; each element still sums the slices in
            // ascending order
            float o[PER];
#pragma unroll
            for (int i = 0; i < PER; ++i) o[i] = 0.0f;
#pragma unroll 2
            for (int s = 0; s < splits; ++s) {
#pragma unroll
                for (int i = 0; i < PER; ++i) {
                    const int e = threadIdx.x + TH * i;
                    if (e < QD) {
                        const int qh = e / D;
                        const float* pt = part + (long long)qh * MAXS * (D + 2) + 2 + e % D;
                        o[i] = fmaf(wts[qh * MAXS + s], __ldcg(pt + s * (D + 2)), o[i]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const int e = threadIdx.x + TH * i;
                if (e < QD) xs[e] = static_cast<T>(o[i]);
            }
        } else {
#pragma unroll 2
            for (int i = 0; i < PER; ++i) {
                const int e = threadIdx.x + TH * i;
                if (e < QD) {
                    const int qh = e / D;
                    const float* pt = part + (long long)qh * MAXS * (D + 2) + 2 + e % D;
                    float o = 0.0f;
#pragma unroll 4
                    for (int s = 0; s < splits; ++s) {
                        o = fmaf(wts[qh * MAXS + s], __ldcg(pt + s * (D + 2)), o);
                    }
                    xs[e] = static_cast<T>(o);
                }
            }
        }
        __syncthreads();
        auto o_rows = [&](int u, const T*& r0, const T*& r1) {
            r0 = wo + 2LL * u * QD;
            r1 = r0 + QD;
        };
        auto o_ahead = [&](int u) {
            if (PF && u + nwarps < K / 2) {
                prefetch_l2(wo + 2LL * (u + nwarps) * QD, 2LL * QD * sizeof(T));
            }
        };
        auto o_emit = [&](int u, float d0, float d1) {  // the residual add
            const int r0 = 2 * u;
            if (lane == 0) {
                h[r0] = static_cast<T>(load_fresh(hsrc + r0)
                                       + static_cast<float>(static_cast<T>(d0)));
                h[r0 + 1] = static_cast<T>(load_fresh(hsrc + r0 + 1)
                                           + static_cast<float>(static_cast<T>(d1)));
            }
        };
        if (!(SKIP & 4)) {
            products<T, QD, SB_QD, LD>(gwarp, K / 2, nwarps, xs, o_rows, o_emit, o_ahead);
        }
        prefetch_gate_up(gwarp + nwarps);  // and its second
        if (!(SKIP & 32)) grid_barrier<BAR>(bar);

        // 4. norm, gate / up, silu(gate) * up
        stage_norm_fresh<T, K>(h, post_norm, eps_post, xs, red);
        auto gate_up_rows = [&](int j, const T*& r0, const T*& r1) {
            r0 = wg + (long long)j * K;
            r1 = wu + (long long)j * K;
        };
        auto gate_up_emit = [&](int j, float g, float up) {  // silu(gate) * up
            if (lane == 0) {
                const float gf = static_cast<float>(static_cast<T>(g));
                const T sig = static_cast<T>(1.0f / (1.0f + expf(-gf)));
                const T a = static_cast<T>(gf * static_cast<float>(sig));
                act[j] = static_cast<T>(static_cast<float>(a)
                                        * static_cast<float>(static_cast<T>(up)));
            }
        };
        auto gate_up_ahead = [&](int j) { prefetch_gate_up(j + 2 * nwarps); };  // two rounds
        if (!(SKIP & 8)) {
            products<T, K, SB_K, LD>(gwarp, INTER, nwarps, xs, gate_up_rows, gate_up_emit,
                                     gate_up_ahead);
        }
        if (PF && gwarp < K / 2) prefetch_l2(wd + 2LL * gwarp * INTER, 2LL * INTER * sizeof(T));
        if (!(SKIP & 32)) grid_barrier<BAR>(bar);

        // 5. down_proj + residual
        stage_fresh<T, INTER>(act, xs);
        auto down_rows = [&](int u, const T*& r0, const T*& r1) {
            r0 = wd + 2LL * u * INTER;
            r1 = r0 + INTER;
        };
        auto down_ahead = [&](int u) {
            if (PF && u + nwarps < K / 2) {
                prefetch_l2(wd + 2LL * (u + nwarps) * INTER, 2LL * INTER * sizeof(T));
            }
        };
        auto down_emit = [&](int u, float d0, float d1) {  // the residual add
            const int r0 = 2 * u;
            if (lane == 0) {
                h[r0] = static_cast<T>(load_fresh(h + r0) + static_cast<float>(static_cast<T>(d0)));
                h[r0 + 1] = static_cast<T>(load_fresh(h + r0 + 1)
                                           + static_cast<float>(static_cast<T>(d1)));
            }
        };
        if (!(SKIP & 16)) {
            products<T, INTER, SB_INTER, LD>(gwarp, K / 2, nwarps, xs, down_rows, down_emit,
                                             down_ahead);
        }
        if (layer + 1 < L) {  // the next layer's q / k / v
            prefetch_qkv(reinterpret_cast<const T* const*>(tab[layer + 1]), gwarp);
        }
        if (layer + 1 < L && !(SKIP & 32)) grid_barrier<BAR>(bar);
    }
"""


def layer_input_names(head_norms: bool) -> tuple[str, ...]:  # not gated: gpu only
    return LAYER_INPUTS + (HEAD_NORM_INPUTS if head_norms else ()) + CACHE_INPUTS


def input_names(layers: int, head_norms: bool) -> list[str]:  # not gated: gpu only
    """The kernel's inputs: the step's, then each layer's as ``l{i}_{name}``."""
    per_layer = layer_input_names(head_norms)
    return list(INPUTS) + [f"l{i}_{name}" for i in range(layers) for name in per_layer]


def source(layers: int, head_norms: bool) -> str:  # not gated: gpu only
    """The kernel's body: ``BODY`` with the table of each layer's input pointers."""
    per_layer = layer_input_names(head_norms)
    table = "\n".join(f"        tab[{i}][{j}] = l{i}_{name};"
                      for i in range(layers) for j, name in enumerate(per_layer))
    return BODY.replace("{table}", table)


def shared_bytes(dtype: mx.Dtype, hidden: int, head_dim: int, n_q: int, inter: int,
                 layers: int, head_norms: bool,
                 warps: int = WARPS) -> int:  # not gated: gpu only
    """The kernel's static shared memory, as ``BODY`` declares it."""
    staged = max(hidden, n_q * head_dim, inter) * dtype.size
    per_warp = warps * head_dim * 4
    return (staged + 32 * 4 + per_warp + head_dim * 4 + n_q * MAX_SPLITS * 4
            + layers * len(layer_input_names(head_norms)) * 8)


@functools.cache
def sm_count() -> int | None:  # not gated: gpu only
    """Device 0's SMs, asked of the CUDA driver (MLX does not say); None without one."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, count = ctypes.c_int(), ctypes.c_int()
    multiprocessor_count = 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    if (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0)
            or cuda.cuDeviceGetAttribute(ctypes.byref(count), multiprocessor_count, device)):
        return None
    return count.value


def blocks() -> int:  # not gated: gpu only
    """The launch's blocks: ``BLOCKS_PER_SM`` an SM, so every block is resident at once
    (BATCHLAB_ROW_STEP_BLOCKS may go up to twice the SMs where the kernel takes at most
    128 registers a thread: two blocks of 8 warps an SM)."""
    return int(os.environ.get(BLOCKS_ENV, 0)) or (sm_count() or SMS) * BLOCKS_PER_SM


@functools.cache
def _kernel(layers: int, head_norms: bool):  # not gated: gpu only
    return mx.fast.cuda_kernel(
        name=f"batchlab_row_step_l{layers}{'_qkn' if head_norms else ''}",
        input_names=input_names(layers, head_norms), output_names=list(OUTPUTS),
        source=source(layers, head_norms), header=HEADER, ensure_row_contiguous=True)


@functools.cache
def _launch_arguments(dtype: mx.Dtype, hidden: int, head_dim: int, n_q: int, n_kv: int,
                      inter: int, layers: int, head_norms: bool, n_blocks: int,
                      skip: int, barrier_kind: int, prefetch: int, stream: int,
                      values_ahead: int, warps: int, keys_a_split: int,
                      merge: int) -> dict:  # not gated: gpu only
    per_layer = len(layer_input_names(head_norms))
    threads = 32 * warps
    return {
        "template": [("T", dtype), ("K", hidden), ("D", head_dim), ("NQ", n_q), ("NKV", n_kv),
                     ("INTER", inter), ("L", layers), ("NP", per_layer),
                     ("QKN", int(head_norms)), ("MAXS", MAX_SPLITS), ("KS", keys_a_split),
                     ("LD", LOADS),
                     ("SKIP", skip), ("BAR", barrier_kind),
                     ("PF", prefetch), ("STREAM", stream), ("VA", values_ahead),
                     ("W", warps), ("MG", merge)],
        "grid": (n_blocks * threads, 1, 1), "threadgroup": (threads, 1, 1),
        "output_shapes": [(1, hidden), ((n_q + 2 * n_kv) * head_dim,), (inter,),
                          (n_q * MAX_SPLITS * (head_dim + 2),)],
        "output_dtypes": [dtype, dtype, dtype, mx.float32]}


def step(h: mx.array, meta: mx.array, barrier: mx.array, consts: mx.array,
         inv_freq: mx.array, layer_arrays: list[mx.array], shape: tuple,
         head_norms: bool) -> mx.array:  # not gated: gpu only
    """The hidden state ``(1, K)`` after every layer, for the row's input ``h`` ``(1, K)``.

    ``meta``: int32 (write column, first key column, RoPE position, buffer columns);
    ``barrier``: uint32 (``BARRIER_WORDS``,), made once, kept for every later call; ``consts``:
    float32 (input norm eps, post-attention norm eps, head norm eps, attention scale);
    ``layer_arrays``: each layer's ``layer_input_names`` in order; ``shape``: (hidden, head
    dim, query heads, KV heads, intermediate, layers)."""
    hidden, head_dim, n_q, n_kv, inter, layers = shape
    arguments = _launch_arguments(h.dtype, hidden, head_dim, n_q, n_kv, inter, layers,
                                  head_norms, blocks(), int(os.environ.get(SKIP_ENV, "0")),
                                  int(os.environ.get(BARRIER_ENV, BARRIER_KIND)),
                                  int(os.environ.get(PREFETCH_ENV, PREFETCH)),
                                  int(os.environ.get(STREAM_ENV, STREAM)),
                                  int(os.environ.get(VALUES_AHEAD_ENV, VALUES_AHEAD)),
                                  int(os.environ.get(WARPS_ENV, WARPS)),
                                  int(os.environ.get(KEYS_A_SPLIT_ENV, KEYS_A_SPLIT)),
                                  int(os.environ.get(MERGE_ENV, MERGE)))
    return _kernel(layers, head_norms)(
        inputs=[h, meta, barrier, consts, inv_freq, *layer_arrays], **arguments)[0]

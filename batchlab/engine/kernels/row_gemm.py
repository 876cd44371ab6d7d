"""``x @ W.T`` whose every row is the same bits at every M: the invariant path's decode GEMM.

cuBLAS picks its kernel (tiles, split-K) by the problem's shape, so a row of a GEMM
depends on M (FACTS.md, "What varies with B on the H200"); the invariant path's answer
was a fixed block of rows (``rowblock.py``), which at B = 1 costs a 256-row GEMM where
l1 runs a GEMV. This kernel's per-element arithmetic is fixed by K alone, so a row's
result is the same whatever M, the tiling or the other rows:

- an output element is the sum over K in 32-column steps; step ``s`` belongs to warp
  ``s % 4`` of its block (``K_WARPS``), each warp accumulating its steps in ascending
  order with tensor-core MMAs (``mma.sync.m16n8k16``, float32 accumulators; each MMA's
  value for an element reads that element's row and column only);
- the four warps' partial sums are then added in warp order, ``((p0 + p1) + p2) + p3``.

Within a step a lane loads 8 consecutive values of its row of x and of W (one 16-byte
load each) and hands them to the MMA as the fragment's k positions ``2t, 2t+1, 2t+8,
2t+9`` (twice): the same permutation on both operands, so the product is the dot
product with a fixed summation order. What M changes is only how many rows and
columns a block covers (``_tiling``): who computes an element, not how.

Three kernels compute that function (who computes an element differs, never how):
the split kernel above (16 rows and under), the class-warp kernel (the default from 17
rows: the split kernel's four class warps with tiles staged through shared memory) and
the tiled kernel (the classes one after another; ``BATCHLAB_ROW_GEMM_CLASS_WARPS=0``).

Only on CUDA (bfloat16 and float16, K a multiple of 8); ``supports`` says which
weights. Elsewhere the backend's matmul is row-invariant already (the CPU) and the
invariant path does not call this.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, replace

import mlx.core as mx

K_WARPS = 4  # warps splitting K: part of the fixed summation order, never tuned by M

_HEADER = """
#define RG_KW 4
__device__ __forceinline__ uint4 rg_load8(const void* base, size_t index, bool ok) {
    // 8 consecutive 16-bit values from element ``index``; zeros past the matrix
    if (!ok) return make_uint4(0u, 0u, 0u, 0u);
    const unsigned short* p = reinterpret_cast<const unsigned short*>(base) + index;
    if ((reinterpret_cast<size_t>(p) & 15) == 0) return *reinterpret_cast<const uint4*>(p);
    unsigned v[4];
    for (int i = 0; i < 4; ++i) v[i] = unsigned(p[2 * i]) | (unsigned(p[2 * i + 1]) << 16);
    return make_uint4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ const void* rg_wrow(const void* w0, const void* w1, const void* w2,
                                             int n0, int n1, int n, int k) {
    // row n of the weights stacked along N (a grouped product), as 16-bit values
    const unsigned short* base = reinterpret_cast<const unsigned short*>(
        n < n0 ? w0 : (n < n0 + n1 ? w1 : w2));
    return base + (size_t)(n < n0 ? n : (n < n0 + n1 ? n - n0 : n - n0 - n1)) * k;
}
template <typename S>
__device__ __forceinline__ int rg_rows(const S& shape, int ndim) {
    // x's rows: the product of its leading axes (x comes as the model's (..., K), not
    // reshaped: two graph ops a call fewer at B = 1, where the step is the host's)
    int m = 1;
    for (int i = 0; i + 1 < ndim; ++i) m *= shape[i];
    return m;
}
template <typename P>
__device__ __forceinline__ void rg_store(P* p, size_t i, float v) {
    p[i] = static_cast<P>(v);  // the model's dtype, or a float32 class sum
}
template <bool BF16>
__device__ __forceinline__ void rg_mma(float* d, unsigned a0, unsigned a1, unsigned a2,
                                       unsigned a3, unsigned b0, unsigned b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}
"""

# Block: K_WARPS x CW warps; warp (kw, cw) covers columns [8 NF cw, 8 NF (cw + 1)) of the
# block's and MT 16-row tiles, over the K steps s with s % K_WARPS == kw, U steps' loads
# issued before their MMAs; XB: whether a 16-row tile's rows 8-15 can exist (false, they
# are zeros known to the compiler: no loads, fewer registers). blockIdx.x: the block's
# rows (adjacent blocks share W's columns, so a weight slab read for one row group is in
# L2 for the next), blockIdx.y: its columns.
_SOURCE = """
    const int K = x_shape[x_ndim - 1];
    const int M = rg_rows(x_shape, x_ndim);
    const int N = w_shape[0];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int kw = warp % RG_KW;
    const int cw = warp / RG_KW;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int n0 = (blockIdx.y * CW + cw) * (8 * NF);
    const int m0 = blockIdx.x * (16 * MT);
    const int steps = (K + 31) / 32;

    float acc[MT][NF][4];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int nf = 0; nf < NF; ++nf)
            #pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nf][i] = 0.0f;

    for (int s0 = kw; s0 < steps; s0 += RG_KW * U) {
        uint4 wf[U][NF];
        uint4 xa[U][MT];
        uint4 xb[U][MT];
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = (s0 + u * RG_KW) * 32 + 8 * t;
            const bool kin = (s0 + u * RG_KW) < steps && k < K;
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf) {
                const int n = n0 + nf * 8 + g;
                wf[u][nf] = rg_load8(w, (size_t)n * K + k, kin && n < N);
            }
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = m0 + mt * 16 + g;
                xa[u][mt] = rg_load8(x, (size_t)r * K + k, kin && r < M);
                xb[u][mt] = XB ? rg_load8(x, (size_t)(r + 8) * K + k, kin && r + 8 < M)
                               : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        #pragma unroll
        for (int u = 0; u < U; ++u) {
            if (s0 + u * RG_KW >= steps) break;
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                #pragma unroll
                for (int nf = 0; nf < NF; ++nf) {
                    rg_mma<BF16>(acc[mt][nf], xa[u][mt].x, xb[u][mt].x, xa[u][mt].y,
                                 xb[u][mt].y, wf[u][nf].x, wf[u][nf].y);
                    rg_mma<BF16>(acc[mt][nf], xa[u][mt].z, xb[u][mt].z, xa[u][mt].w,
                                 xb[u][mt].w, wf[u][nf].z, wf[u][nf].w);
                }
            }
        }
    }

    // the K warps' partial sums, added in warp order: ((p0 + p1) + p2) + p3
    __shared__ float part[RG_KW - 1][CW][NF * 4][32];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (kw > 0) {
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf)
                #pragma unroll
                for (int i = 0; i < 4; ++i) part[kw - 1][cw][nf * 4 + i][lane] = acc[mt][nf][i];
        }
        __syncthreads();
        if (kw == 0) {
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf) {
                #pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float v = acc[mt][nf][i];
                    #pragma unroll
                    for (int j = 0; j < RG_KW - 1; ++j) v += part[j][cw][nf * 4 + i][lane];
                    const int row = m0 + mt * 16 + g + (i >= 2 ? 8 : 0);
                    const int col = n0 + nf * 8 + 2 * t + (i & 1);
                    if (row < M && col < N) out[(size_t)row * N + col] = static_cast<T>(v);
                }
            }
        }
        __syncthreads();
    }
"""


# The problem's sizes and the thread's place, as the tiled kernels begin
_DIMS = """
    const int K = x_shape[x_ndim - 1];
    const int M = rg_rows(x_shape, x_ndim);
    const int N = w_shape[0];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
"""


# How the tiled kernels load a K step: each thread copies the 16-byte column c16 of row r
# of each pass of P rows of x's tile and of W's, through cp.async (zeros past the
# matrix); the rows' addresses are set once, outside the main loop (computed per chunk,
# the loads' integer work outweighed the MMAs: the class-warp kernel's first version)
_ROW_LOADS = """
    constexpr int P = THREADS / 4;
    constexpr int XP = (BM + P - 1) / P;
    constexpr int WP = (BN + P - 1) / P;
    const int r = tid >> 2;
    const int c16 = tid & 3;
    const unsigned short* xrow[XP];  // null: no such row
    const unsigned short* wrow[WP];
    #pragma unroll
    for (int p = 0; p < XP; ++p) {
        const int xr = m0 + r + P * p;
        xrow[p] = (BM % P == 0 || r + P * p < BM) && xr < M
            ? reinterpret_cast<const unsigned short*>(x) + (size_t)xr * K + c16 * 8 : nullptr;
    }
    #pragma unroll
    for (int p = 0; p < WP; ++p) {
        const int wr = n0 + r + P * p;
        wrow[p] = (BN % P == 0 || r + P * p < BN) && wr < N
            ? reinterpret_cast<const unsigned short*>(w) + (size_t)wr * K + c16 * 8 : nullptr;
    }
    auto copy16 = [&](unsigned short* dst, const unsigned short* row, int k, bool ok) {
        // zeros past the matrix: no bytes read, a valid address all the same
        const unsigned short* src = ok ? row + k : reinterpret_cast<const unsigned short*>(x);
        if (aligned) {
            const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n"
                         :: "r"(addr), "l"(src), "r"(ok ? 16 : 0));
        } else {
            *reinterpret_cast<uint4*>(dst) = rg_load8(src, 0, ok);
        }
    };
    // step s's 32 columns of this block's rows of x and of W into the tiles xt and wt
    auto load_step = [&](unsigned short (*xt)[32], unsigned short (*wt)[32], int s) {
        const bool kin = s < steps && s * 32 + c16 * 8 < K;
        #pragma unroll
        for (int p = 0; p < XP; ++p) {
            if (BM % P == 0 || r + P * p < BM)
                copy16(&xt[r + P * p][c16 * 8], xrow[p], s * 32, kin && xrow[p] != nullptr);
        }
        #pragma unroll
        for (int p = 0; p < WP; ++p) {
            if (BN % P == 0 || r + P * p < BN)
                copy16(&wt[r + P * p][c16 * 8], wrow[p], s * 32, kin && wrow[p] != nullptr);
        }
    };
"""


# The same function of each element for larger M, tiled through shared memory: a block
# of WM x WN warps computes BM = 16 MT WM rows x BN = 8 NF WN columns (warp tile 16 MT x
# 8 NF) over K, in the order of the kernel above: the steps of class 0 (s % 4 == 0)
# ascending into a fresh accumulator, then class 1's, ..., each class's sum added to the
# running one when it ends, ((p0 + p1) + p2) + p3. The MMAs get the same 8 values a lane
# loads above (x's row and W's row at 32 s + 8 t), so every element's bits equal the
# kernel above's: which of the two runs is a matter of speed alone. With KS = 4 the
# classes are split over blockIdx.z: each block writes its class's float32 sum p_c and
# ``_COMBINE_SOURCE`` adds them in the same order (4x the blocks where N / BN is small).
# Tiles come in through cp.async, ST stages deep of SS steps each (one barrier a stage;
# zeros past the matrix); rows are 64 bytes, so a lane group's 16-byte reads of two rows
# cover the 32 banks once.
_TILED_SOURCE = """
    constexpr int BM = 16 * MT * WM;
    constexpr int BN = 8 * NF * WN;
    constexpr int THREADS = 32 * WM * WN;
    static_assert(ST >= 2 && SS >= 1 && (KS == 1 || KS == RG_KW),
                  "stages, steps a stage, and whole classes a block");
""" + _DIMS + """
    const int wm = warp % WM;         // the warp's rows of the block's BM
    const int wn = warp / WM;         // its columns of the block's BN
    const int g = lane >> 2;
    const int t = lane & 3;
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int steps = (K + 31) / 32;
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    extern __shared__ __align__(16) unsigned short rg_tiles[];
    unsigned short (*xs)[SS][BM][32] =
        reinterpret_cast<unsigned short (*)[SS][BM][32]>(rg_tiles);
    unsigned short (*ws)[SS][BN][32] =
        reinterpret_cast<unsigned short (*)[SS][BN][32]>(rg_tiles + ST * SS * BM * 32);

    // this block's steps: every class in the class order (KS = 1), or class blockIdx.z
    const int only = KS == 1 ? -1 : (int)blockIdx.z;
    const int n_steps = KS == 1 ? steps : (steps - only + RG_KW - 1) / RG_KW;
    const int n_stages = (n_steps + SS - 1) / SS;
    // where classes 1, 2, 3 begin in the class order (class c holds s = c, c + 4, ...)
    const int b1 = (steps + RG_KW - 1) / RG_KW;
    const int b2 = b1 + (steps + RG_KW - 2) / RG_KW;
    const int b3 = b2 + (steps + RG_KW - 3) / RG_KW;
    // the q-th step of the class order (past the last: steps, which loads zeros)
    auto step_of = [&](int q) {
        if (q >= n_steps) return steps;
        if (KS != 1) return only + RG_KW * q;
        const int c = (q >= b1) + (q >= b2) + (q >= b3);
        const int start = c == 0 ? 0 : (c == 1 ? b1 : (c == 2 ? b2 : b3));
        return c + RG_KW * (q - start);
    };
""" + _ROW_LOADS + """
    auto load_tile = [&](int buf, int stage) {  // the stage's SS steps into its tiles
        #pragma unroll
        for (int j = 0; j < SS; ++j) load_step(xs[buf][j], ws[buf][j], step_of(stage * SS + j));
        asm volatile("cp.async.commit_group;\\n" ::);
    };

    float acc[MT][NF][4];
    float sum[MT][NF][4];  // KS = 1: the running sum of the classes done
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int nf = 0; nf < NF; ++nf)
            #pragma unroll
            for (int i = 0; i < 4; ++i) { acc[mt][nf][i] = 0.0f; sum[mt][nf][i] = 0.0f; }

    // a commit group per stage, empty past the last, so that waiting for all but the
    // ST - 2 newest groups always means stage p has landed
    for (int p = 0; p < ST - 1; ++p) {
        if (p < n_stages) load_tile(p, p);
        else asm volatile("cp.async.commit_group;\\n" ::);
    }
    int cls = 0;
    for (int p = 0; p < n_stages; ++p) {
        asm volatile("cp.async.wait_group %0;\\n" :: "n"(ST - 2));
        __syncthreads();  // stage p visible to all; every warp is done with stage p - 1's buffer
        if (p + ST - 1 < n_stages) load_tile((p + ST - 1) % ST, p + ST - 1);
        else asm volatile("cp.async.commit_group;\\n" ::);
        const int buf = p % ST;
        #pragma unroll
        for (int j = 0; j < SS; ++j) {
            const int q = p * SS + j;  // the step's place in the class order
            if (SS > 1 && q >= n_steps) break;
            uint4 wf[NF];
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf)
                wf[nf] = *reinterpret_cast<const uint4*>(
                    &ws[buf][j][wn * (8 * NF) + nf * 8 + g][8 * t]);
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = wm * (16 * MT) + mt * 16 + g;
                const uint4 xa = *reinterpret_cast<const uint4*>(&xs[buf][j][r][8 * t]);
                const uint4 xb = *reinterpret_cast<const uint4*>(&xs[buf][j][r + 8][8 * t]);
                #pragma unroll
                for (int nf = 0; nf < NF; ++nf) {
                    rg_mma<BF16>(acc[mt][nf], xa.x, xb.x, xa.y, xb.y, wf[nf].x, wf[nf].y);
                    rg_mma<BF16>(acc[mt][nf], xa.z, xb.z, xa.w, xb.w, wf[nf].z, wf[nf].w);
                }
            }
            const bool class_ends = q + 1 == n_steps || q + 1 == b1 || q + 1 == b2 || q + 1 == b3;
            if (KS == 1 && class_ends) {  // p_c done: the running sum takes it, a fresh one follows
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    #pragma unroll
                    for (int nf = 0; nf < NF; ++nf)
                        #pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            sum[mt][nf][i] =
                                cls == 0 ? acc[mt][nf][i] : sum[mt][nf][i] + acc[mt][nf][i];
                            acc[mt][nf][i] = 0.0f;
                        }
                ++cls;
            }
        }
    }
    if (KS == 1) {
        // classes with no step (K < 128) add their zero sums, as the split kernel's idle warps
        for (; cls < RG_KW; ++cls)
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int nf = 0; nf < NF; ++nf)
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) sum[mt][nf][i] = sum[mt][nf][i] + 0.0f;
    }

    // KS = 1: the element (T); KS = 4: class blockIdx.z's sum (float32, (4, M, N))
    const size_t plane = KS == 1 ? 0 : (size_t)only * M * N;
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int nf = 0; nf < NF; ++nf)
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = m0 + wm * (16 * MT) + mt * 16 + g + (i >= 2 ? 8 : 0);
                const int col = n0 + wn * (8 * NF) + nf * 8 + 2 * t + (i & 1);
                if (row < M && col < N)
                    rg_store(out, plane + (size_t)row * N + col,
                             KS == 1 ? sum[mt][nf][i] : acc[mt][nf][i]);
            }
"""

# The same function once more, the four classes on four warps of a block as in the split
# kernel and the tiles staged through shared memory as in the tiled one: a block of
# K_WARPS x WM x WN warps covers BM = 16 MT WM rows x BN = 8 NF WN columns; a pipeline
# stage holds four consecutive K steps (128 columns), step 4 j + c for class c's warps,
# so each warp sums its class's steps in ascending order in one set of accumulators (the
# tiled kernel's class order holds two: a running sum beside the class in progress,
# which caps its warp tile). The classes meet once, at the end, through shared memory:
# ((p0 + p1) + p2) + p3, as the split kernel adds its warps' partials. A warp's 16-byte
# reads cover 8 rows of 64 bytes, one class's step, as the tiled kernel's do.
_CLASS_WARPS_SOURCE = """
    constexpr int BM = 16 * MT * WM;
    constexpr int BN = 8 * NF * WN;
    constexpr int SPATIAL = WM * WN;             // warps a class
    constexpr int THREADS = 32 * RG_KW * SPATIAL;
    constexpr int FRAGS = MT * NF * 4;           // a lane's accumulators
    static_assert(ST >= 2, "stages");
""" + _DIMS + """
    const int cls = warp / SPATIAL;   // the K class this warp sums: steps s % 4 == cls
    const int sw = warp % SPATIAL;
    const int wm = sw % WM;
    const int wn = sw / WM;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int steps = (K + 31) / 32;
    const int quads = (steps + RG_KW - 1) / RG_KW;  // pipeline stages: 4 steps each
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    extern __shared__ __align__(16) unsigned short rg_tiles[];
    unsigned short (*xs)[RG_KW][BM][32] =
        reinterpret_cast<unsigned short (*)[RG_KW][BM][32]>(rg_tiles);
    unsigned short (*ws)[RG_KW][BN][32] =
        reinterpret_cast<unsigned short (*)[RG_KW][BN][32]>(rg_tiles + ST * RG_KW * BM * 32);

""" + _ROW_LOADS + """
    auto load_tile = [&](int buf, int q) {  // steps RG_KW q + c into class c's tiles
        #pragma unroll
        for (int c = 0; c < RG_KW; ++c) load_step(xs[buf][c], ws[buf][c], RG_KW * q + c);
        asm volatile("cp.async.commit_group;\\n" ::);
    };

    float acc[MT][NF][4];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int nf = 0; nf < NF; ++nf)
            #pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nf][i] = 0.0f;

    // a commit group per stage, empty past the last (as the tiled kernel's)
    for (int p = 0; p < ST - 1; ++p) {
        if (p < quads) load_tile(p, p);
        else asm volatile("cp.async.commit_group;\\n" ::);
    }
    for (int q = 0; q < quads; ++q) {
        asm volatile("cp.async.wait_group %0;\\n" :: "n"(ST - 2));
        __syncthreads();  // stage q visible to all; every warp is done with stage q - 1's buffer
        if (q + ST - 1 < quads) load_tile((q + ST - 1) % ST, q + ST - 1);
        else asm volatile("cp.async.commit_group;\\n" ::);
        const int buf = q % ST;
        if (RG_KW * q + cls < steps) {  // this class's step of the stage exists
            uint4 wf[NF];
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf)
                wf[nf] = *reinterpret_cast<const uint4*>(
                    &ws[buf][cls][wn * (8 * NF) + nf * 8 + g][8 * t]);
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = wm * (16 * MT) + mt * 16 + g;
                const uint4 xa = *reinterpret_cast<const uint4*>(&xs[buf][cls][r][8 * t]);
                const uint4 xb = *reinterpret_cast<const uint4*>(&xs[buf][cls][r + 8][8 * t]);
                // each accumulator's two MMAs in order, NF MMAs apart (back to back, the
                // second would wait on the first: asm volatile keeps the written order)
                #pragma unroll
                for (int nf = 0; nf < NF; ++nf)
                    rg_mma<BF16>(acc[mt][nf], xa.x, xb.x, xa.y, xb.y, wf[nf].x, wf[nf].y);
                #pragma unroll
                for (int nf = 0; nf < NF; ++nf)
                    rg_mma<BF16>(acc[mt][nf], xa.z, xb.z, xa.w, xb.w, wf[nf].z, wf[nf].w);
            }
        }
    }

    // the classes' partial sums, added in class order: ((p0 + p1) + p2) + p3 (a class
    // with no step adds its zeros, as the split kernel's idle warps do)
    asm volatile("cp.async.wait_group 0;\\n" ::);
    __syncthreads();  // the stage buffers are free: they take classes 1-3's partials
    float* part = reinterpret_cast<float*>(rg_tiles);  // [RG_KW - 1][SPATIAL][FRAGS][32]
    auto slot = [&](int c, int mt, int nf, int i) -> float& {  // class c + 1's partial
        return part[((c * SPATIAL + sw) * FRAGS + (mt * NF + nf) * 4 + i) * 32 + lane];
    };
    if (cls > 0) {
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf)
                #pragma unroll
                for (int i = 0; i < 4; ++i) slot(cls - 1, mt, nf, i) = acc[mt][nf][i];
    }
    __syncthreads();
    if (cls == 0) {
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nf = 0; nf < NF; ++nf)
                #pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float v = acc[mt][nf][i];
                    #pragma unroll
                    for (int c = 0; c < RG_KW - 1; ++c) v += slot(c, mt, nf, i);
                    const int row = m0 + wm * (16 * MT) + mt * 16 + g + (i >= 2 ? 8 : 0);
                    const int col = n0 + wn * (8 * NF) + nf * 8 + 2 * t + (i & 1);
                    if (row < M && col < N) out[(size_t)row * N + col] = static_cast<T>(v);
                }
    }
"""

# The class sums of a KS = 4 tiled call, added in the split kernel's order
# ((p0 + p1) + p2) + p3 and rounded once to the model's dtype.
_COMBINE_SOURCE = """
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t total = (size_t)part_shape[1] * part_shape[2];
    if (i >= total) return;
    float v = part[i];
    #pragma unroll
    for (int c = 1; c < RG_KW; ++c) v = __fadd_rn(v, part[c * total + i]);
    out[i] = static_cast<T>(v);
"""

# A grouped product: one call for several weights of one input (q/k/v, gate/up), their
# rows stacked along N in the kernel (nothing concatenated in memory). Each element is
# computed as in the single product, from its own row of its own weight.
_GROUPED = (
    ("const int N = w_shape[0];",
     "const int N0 = w0_shape[0];\n    const int N1 = w1_shape[0];\n"
     "    const int N = N0 + N1 + (THREE ? w2_shape[0] : 0);"),
    ("rg_load8(w, (size_t)n * K + k, kin && n < N)",
     "rg_load8(rg_wrow(w0, w1, w2, N0, N1, n, K), k, kin && n < N)"),
    ("reinterpret_cast<size_t>(w)",
     "reinterpret_cast<size_t>(w0) | reinterpret_cast<size_t>(w1) | reinterpret_cast<size_t>(w2)"),
    ("reinterpret_cast<const unsigned short*>(w) + (size_t)wr * K",
     "reinterpret_cast<const unsigned short*>(rg_wrow(w0, w1, w2, N0, N1, wr, K))"),
)


def grouped_source(source: str) -> str:  # not gated: gpu only
    """``source`` over weights ``w0, w1, w2`` stacked along N (``w2`` read only when
    ``THREE``); every anchor it rewrites must be found, or the kernel would read ``w``."""
    for old, new in _GROUPED:
        if old in source:
            source = source.replace(old, new)
    if re.search(r"(?<![.\w])w(?!\w)", source):  # a bare ``w`` (``.w`` is a uint4 field)
        raise AssertionError("row_gemm: a grouped kernel still reads the single weight w")
    return source


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitShape:
    """The split kernel's launch: who computes which element, never how (the docstring)."""

    cw: int  # warps along N (each with K_WARPS warps along K)
    nf: int  # 8-column fragments a warp
    mt: int  # 16-row tiles a warp
    u: int  # K steps whose loads a warp issues before their MMAs
    xb: bool  # rows 8-15 of a 16-row tile can exist


@dataclass(frozen=True, kw_only=True, slots=True)
class TiledShape:
    """The tiled kernel's launch: block of wm x wn warps, warp tile 16 mt x 8 nf."""

    wm: int
    wn: int
    mt: int
    nf: int
    stages: int  # pipeline stages in flight through cp.async
    ks: int = 1  # 1, or K_WARPS: the classes on separate blocks, then one add kernel
    ss: int = 1  # the tiled kernel's K steps a stage (one barrier a stage)
    min_blocks: int = 1  # __launch_bounds__'s blocks per SM (caps the registers)
    # the classes on K_WARPS warps each (``_CLASS_WARPS_SOURCE``): wm x wn warps a class,
    # a stage four steps deep; ks stays 1
    class_warps: bool = False

    @property
    def threads(self) -> int:  # not gated: gpu only
        return 32 * self.wm * self.wn * (K_WARPS if self.class_warps else 1)

    @property
    def tile(self) -> tuple[int, int]:  # not gated: gpu only
        return 16 * self.mt * self.wm, 8 * self.nf * self.wn

    @property
    def shared_bytes(self) -> int:  # not gated: gpu only
        if not self.class_warps:  # a 32-value row of 16-bit values a step and stage
            return self.stages * self.ss * sum(self.tile) * 64
        stages = self.stages * K_WARPS * sum(self.tile) * 64
        partials = (K_WARPS - 1) * self.wm * self.wn * self.mt * self.nf * 4 * 32 * 4
        return max(stages, partials)  # the partials reuse the stage buffers


def _launch_bounds(threads: int, min_blocks: int) -> str:  # not gated: gpu only
    return (f"#undef __global__\n#define __global__ __location__(global) "
            f"__launch_bounds__({threads}, {min_blocks})\n")


def compact(source: str) -> str:  # not gated: gpu only
    """``source`` without its comments, indentation and blank lines: the same code.
    MLX joins a custom kernel's header and source into a new string on every call and
    hashes it on every launch (``mx.fast.cuda_kernel``), ~113 times a B = 1 step here."""
    lines = []
    for line in source.splitlines():
        code, _, comment = line.partition("//")
        if comment and code.count('"') % 2:  # a // inside a string literal
            code = line
        if code.strip():
            lines.append(code.strip())
    return "\n".join(lines) + "\n"


@functools.cache
def _kernel(tiled: TiledShape | None, grouped: bool = False):  # not gated: gpu only
    if tiled is None:
        name, source, header, shared = "batchlab_row_gemm", _SOURCE, _HEADER, 0
    else:  # launch bounds are literals in the header: one kernel name per bound
        layout = "class_warps" if tiled.class_warps else "tiled"
        name = f"batchlab_row_gemm_{layout}_{tiled.threads}_{tiled.min_blocks}"
        source = _CLASS_WARPS_SOURCE if tiled.class_warps else _TILED_SOURCE
        shared = tiled.shared_bytes
        header = _HEADER + _launch_bounds(tiled.threads, tiled.min_blocks)
    return mx.fast.cuda_kernel(
        name=name + ("_group" if grouped else ""),
        input_names=["x", "w0", "w1", "w2"] if grouped else ["x", "w"], output_names=["out"],
        source=compact(grouped_source(source) if grouped else source), header=compact(header),
        ensure_row_contiguous=True, shared_memory=shared)


@functools.cache
def _combine():  # not gated: gpu only
    return mx.fast.cuda_kernel(
        name="batchlab_row_gemm_combine", input_names=["part"], output_names=["out"],
        source=_COMBINE_SOURCE, header=_HEADER, ensure_row_contiguous=True)


def supports(weight: mx.array, x_dtype: mx.Dtype | None = None) -> bool:
    """Whether ``row_gemm`` takes ``weight`` (N, K): a 2-D float16 / bfloat16 matrix with
    K a multiple of 8 (each lane's 8-value loads), and ``x_dtype`` its dtype if given.
    A function of the weight alone: the same answer at every M."""
    return (weight.ndim == 2 and weight.dtype in (mx.bfloat16, mx.float16)
            and weight.shape[1] % 8 == 0 and (x_dtype is None or x_dtype == weight.dtype))


# The split kernel's shapes (made once: ``_tiling`` runs ~113 times a B = 1 step):
# 8 columns a block, N / 8 blocks of 4 warps, 8 K steps' loads in flight a warp, rows
# 8-15 only from 9 rows (4 steps in flight before the twenty-first round's sweep, which
# put 8 first at 1, 8 and 16 rows on both models: reports/bench/cuda-sm90/issue28-host-calls/);
# 32 columns and 64 rows; 64 columns and 64 rows (8 warps, whose registers, ~130 a
# thread, a block of 8 warps can hold at any register count the compiler picks).
SPLIT_8 = SplitShape(cw=1, nf=1, mt=1, u=8, xb=False)
SPLIT_16 = SplitShape(cw=1, nf=1, mt=1, u=8, xb=True)
SPLIT_64 = SplitShape(cw=2, nf=2, mt=4, u=2, xb=True)
SPLIT_WIDE = SplitShape(cw=2, nf=4, mt=4, u=1, xb=True)


def _tiling(m: int) -> SplitShape:  # not gated: gpu only
    """The split kernel's shape for M rows: only who computes which element (the
    summation order is K's): small M spreads the columns over many blocks for the
    weight's bandwidth, larger M gives a block more columns and rows so that x is read
    fewer times."""
    if m <= 16:
        return SPLIT_8 if m <= 8 else SPLIT_16
    return SPLIT_64 if m <= 64 else SPLIT_WIDE


# The tiled kernel's shape from TILED_FROM rows: 128 x 64 tiles, registers capped for two
# blocks an SM (the s19 sweep; 8B at B=256 38.1 ms a step against 39.4 before, within noise).
TILED = TiledShape(wm=4, wn=2, mt=2, nf=4, stages=4, min_blocks=2)


# Launch shapes the H200 sweep times against the defaults (tools/h200/row_gemm_sweep.py;
# tools/cuda/nvrtc_check.py compiles each): every one computes the same bits.
CANDIDATE_SPLIT = (
    SplitShape(cw=1, nf=1, mt=1, u=4, xb=True), SplitShape(cw=1, nf=1, mt=1, u=4, xb=False),
    SplitShape(cw=1, nf=1, mt=1, u=8, xb=True), SplitShape(cw=1, nf=1, mt=1, u=16, xb=False),
    SplitShape(cw=2, nf=1, mt=1, u=8, xb=False), SplitShape(cw=2, nf=2, mt=2, u=4, xb=True))
# The class-warp kernel's shapes (every one the same bits as the split kernel): warp tiles
# up to 64 x 64, which the tiled kernel's two sets of accumulators cannot hold.
CANDIDATE_CLASS_WARPS = (
    TiledShape(wm=1, wn=1, mt=4, nf=8, stages=3, min_blocks=2, class_warps=True),
    TiledShape(wm=2, wn=1, mt=4, nf=8, stages=3, class_warps=True),
    TiledShape(wm=1, wn=2, mt=4, nf=4, stages=3, min_blocks=2, class_warps=True),
    TiledShape(wm=2, wn=2, mt=2, nf=4, stages=3, class_warps=True),
    TiledShape(wm=1, wn=1, mt=4, nf=4, stages=3, min_blocks=3, class_warps=True),
    TiledShape(wm=1, wn=1, mt=2, nf=8, stages=4, min_blocks=2, class_warps=True),
    TiledShape(wm=1, wn=2, mt=2, nf=8, stages=3, class_warps=True),
    TiledShape(wm=1, wn=2, mt=4, nf=8, stages=3, class_warps=True),
    # the 64 x 128 and 128 x 64 tiles on 16 warps, each warp half the accumulators of
    # the shape above: Nsight found the class-warp kernel bound by latency with too few
    # warps an SM (64 x 64 tiles, issue28-class-warps/); registers and spills offline:
    # reports/bench/cuda-sm90/issue28-stream/ ("Twenty-fourth round")
    TiledShape(wm=1, wn=4, mt=4, nf=4, stages=3, class_warps=True),
    TiledShape(wm=2, wn=2, mt=4, nf=4, stages=3, class_warps=True))
CANDIDATE_TILED = (
    TiledShape(wm=4, wn=2, mt=2, nf=4, stages=4, ks=4),
    TiledShape(wm=4, wn=2, mt=2, nf=4, stages=4, min_blocks=2),
    TiledShape(wm=4, wn=2, mt=2, nf=4, stages=4, ks=4, min_blocks=2),
    TiledShape(wm=2, wn=4, mt=4, nf=4, stages=4),
    TiledShape(wm=2, wn=4, mt=4, nf=4, stages=4, ks=4),
    TiledShape(wm=2, wn=2, mt=4, nf=4, stages=4, ks=4, min_blocks=2),
    TiledShape(wm=4, wn=2, mt=2, nf=8, stages=3, ks=4),
    TiledShape(wm=4, wn=4, mt=2, nf=4, stages=4),
    TiledShape(wm=2, wn=4, mt=4, nf=4, stages=3),
    # 128 x 128 tiles with several K steps a stage (fewer barriers a product): the same
    # bits, behind the 64 x 128 class-warp shape at 256 rows (the twenty-second round's sweep)
    TiledShape(wm=2, wn=4, mt=4, nf=4, stages=3, ss=2),
    TiledShape(wm=2, wn=4, mt=4, nf=4, stages=2, ss=4),
    *CANDIDATE_CLASS_WARPS)


# Shapes that fill the device where the base shapes leave it under two waves of blocks
# (132 SMs on the H200); the default since a decode step was measured with them
# (BATCHLAB_ROW_GEMM_FILL=0 turns them off, to time the base shapes). Nsight Compute,
# llama-3.2-1b's k/v (2048 x 512) and q/o (2048 x 2048), caches flushed
# (reports/bench/cuda-sm90/issue28-shapes/):
# - tiled, the four classes on separate blocks (ks = K_WARPS: 4x the blocks, then the
#   float32 add): 14-17 us a product at 128 and 256 rows against 40 (8 and 32 blocks);
# - split at 17-64 rows, 32-row tiles instead of 64: 14 us at 64 rows against 23.
# The decode step with and without them, and their CUDA gate: docs/invariant.md ("The
# row GEMM").
FILL_ENV = "BATCHLAB_ROW_GEMM_FILL"
# Above 16 rows every product runs the class-warp kernel by default: 64 x 64 tiles up to
# 128 rows, on the H200 the fastest shape, or within 10% of it, on every projection of
# llama-3.2-1b and llama-3.1-8b at 64-256 rows, and a shorter invariant decode step at
# B 64 and 256 (reports/bench/cuda-sm90/issue28-class-warps/); 64 x 128 tiles
# (CANDIDATE_CLASS_WARPS[7]) from CLASS_WARPS_WIDE_FROM rows, the sweep's fastest shape at
# 256 rows on both models twice (reports/bench/cuda-sm90/issue28-wide/). The switch picks
# another at every row count above 16: "i" runs CANDIDATE_CLASS_WARPS[i - 1], "i,j" the
# i-th from TILED_FROM rows and the j-th at 17-64; "0" the split and tiled shapes below
# (the same bits whichever shape).
CLASS_WARPS_ENV = "BATCHLAB_ROW_GEMM_CLASS_WARPS"
CLASS_WARPS_FROM = 17
CLASS_WARPS_WIDE_FROM = 129
CLASS_WARPS_DEFAULT = CANDIDATE_CLASS_WARPS[0]  # 64 x 64
CLASS_WARPS_WIDE = CANDIDATE_CLASS_WARPS[7]  # 64 x 128
FILL_BELOW_BLOCKS = 2 * 132
TILED_KSPLIT = replace(TILED, ks=K_WARPS)
SPLIT_FILL = SplitShape(cw=2, nf=2, mt=2, u=4, xb=True)


@functools.cache
def class_warps_choice(value: str) -> tuple[int, ...]:  # not gated: gpu only
    """``CLASS_WARPS_ENV``'s value as candidate numbers: () for "0", (i,) or (i, j)."""
    try:
        chosen = tuple(int(v) for v in value.split(","))
    except ValueError:
        chosen = ()
    if chosen == (0,):
        return ()
    if not 1 <= len(chosen) <= 2 or not all(1 <= c <= len(CANDIDATE_CLASS_WARPS) for c in chosen):
        raise ValueError(
            f"{CLASS_WARPS_ENV}={value!r}: give 0 (the split and tiled kernels), a candidate "
            f"1-{len(CANDIDATE_CLASS_WARPS)} (CANDIDATE_CLASS_WARPS), or two: "
            f"'from {TILED_FROM} rows,at 17-64'")
    return chosen


def _shape(m: int, n: int, tiled: bool) -> SplitShape | TiledShape:  # not gated: gpu only
    """The launch shape for an (m, n) output: who computes what, never how."""
    if m >= CLASS_WARPS_FROM:  # the environment read only here (never at B = 1)
        value = os.environ.get(CLASS_WARPS_ENV)
        if value is None:
            return CLASS_WARPS_WIDE if m >= CLASS_WARPS_WIDE_FROM else CLASS_WARPS_DEFAULT
        chosen = class_warps_choice(value)
        if chosen:
            return CANDIDATE_CLASS_WARPS[chosen[0 if tiled else -1] - 1]
    if not tiled:  # the environment read only where it can change the shape (not at B = 1)
        if 16 < m <= 64 and os.environ.get(FILL_ENV) != "0":
            return SPLIT_FILL
        return _tiling(m)
    bm, bn = TILED.tile
    if -(-m // bm) * -(-n // bn) < FILL_BELOW_BLOCKS and os.environ.get(FILL_ENV) != "0":
        return TILED_KSPLIT
    return TILED


# From this many rows the tiled kernel runs (at 256 rows the split kernel took 2.4-8x
# cuBLAS's time on llama-3.2-1b's shapes: reports/bench/cuda-sm90/issue28-row-gemm/).
# The bits are the same either way: a choice of speed alone.
TILED_FROM = 65


def row_gemm(x: mx.array, weight: mx.array, tiled: bool | None = None,
             shape: SplitShape | TiledShape | None = None) -> mx.array:  # not gated: gpu only
    """``x @ weight.T`` over x's last axis, each row's bits independent of the others and
    of their number (see the module docstring). CUDA only; ``supports(weight)`` first.
    ``tiled``: force one of the two kernels, ``shape``: force a launch shape (the probes'
    comparisons); None picks by M."""
    return _product(x, [weight], tiled, shape)


def row_gemm_group(x: mx.array, weights: list[mx.array], tiled: bool | None = None,
                   shape: SplitShape | TiledShape | None = None) -> mx.array:  # not gated: gpu only
    """``concatenate([x @ w.T for w in weights], -1)`` in one call for 2 or 3 weights of
    one K and dtype, each element the bits ``row_gemm(x, w)`` gives it."""
    if len(weights) not in (2, 3):
        raise ValueError(f"row_gemm_group takes 2 or 3 weights, got {len(weights)}")
    return _product(x, list(weights), tiled, shape)


@functools.cache
def _shape_template(shape: SplitShape | TiledShape) -> list:  # not gated: gpu only
    """The kernel's template values of ``shape``, made once per shape (the caller's
    ``+`` copies it, so the cached list is never changed)."""
    if isinstance(shape, TiledShape):
        values = [("WM", shape.wm), ("WN", shape.wn), ("MT", shape.mt), ("NF", shape.nf),
                  ("ST", shape.stages), ("KS", shape.ks)]
        # SS is the tiled kernel's alone: the class-warp kernel's text stays the gated one
        return values if shape.class_warps else values + [("SS", shape.ss)]
    return [("CW", shape.cw), ("NF", shape.nf), ("MT", shape.mt), ("U", shape.u),
            ("XB", shape.xb)]


def _product(x: mx.array, weights: list[mx.array], tiled: bool | None,
             shape: SplitShape | TiledShape | None) -> mx.array:  # not gated: gpu only
    # No shape or dtype check here: it runs ~113 times a B = 1 step, whose time is the
    # host's; the callers check once (``supports``, ``_Blocked._by_rows``, the grouping)
    # x goes in as it is, (..., K): the kernel reads its rows from the leading axes
    lead = x.shape[:-1]
    m, n = math.prod(lead), sum(w.shape[0] for w in weights)
    grouped = len(weights) > 1
    # a grouped kernel takes three weights: a pair repeats its second (read only if THREE)
    inputs = [x, *weights, *weights[-1:] * (3 - len(weights))] if grouped else [x, weights[0]]
    template = [("T", x.dtype), ("BF16", x.dtype == mx.bfloat16)]
    if grouped:
        template.append(("THREE", len(weights) == 3))
    if shape is None:
        use_tiled = m >= TILED_FROM if tiled is None else tiled
        shape = _shape(m, n, use_tiled)
    if isinstance(shape, TiledShape):
        bm, bn = shape.tile
        out = _kernel(shape, grouped)(
            inputs=inputs, template=template + _shape_template(shape),
            grid=(shape.threads * -(-m // bm), -(-n // bn), shape.ks),
            threadgroup=(shape.threads, 1, 1),
            output_shapes=[(*lead, n) if shape.ks == 1 else (shape.ks, m, n)],
            output_dtypes=[x.dtype if shape.ks == 1 else mx.float32])[0]
        if shape.ks != 1:
            out = _combine()(inputs=[out], template=[("T", x.dtype)],
                             grid=(256 * -(-(m * n) // 256), 1, 1), threadgroup=(256, 1, 1),
                             output_shapes=[(*lead, n)], output_dtypes=[x.dtype])[0]
        return out
    threads = 32 * K_WARPS * shape.cw
    return _kernel(None, grouped)(
        inputs=inputs, template=template + _shape_template(shape),
        grid=(threads * -(-m // (16 * shape.mt)), -(-n // (8 * shape.nf * shape.cw)), 1),
        threadgroup=(threads, 1, 1),
        output_shapes=[(*lead, n)], output_dtypes=[x.dtype])[0]

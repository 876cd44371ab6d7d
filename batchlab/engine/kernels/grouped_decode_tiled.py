"""fast's decode attention with its own rounding (CUDA, the default: ``grouped_decode.TILED``;
``BATCHLAB_GQA_TILED=0`` gives MLX's bits back).

The grouped kernel's layouts (``grouped_decode.py``) put every key through MLX's one-pass
arithmetic, op for op, so fast's bits stay MLX's. That order costs about 150 instructions a
key and warp at llama-3.1-8b's heads (a warp-wide butterfly per key and query head, then an
online-softmax rescale of every output dim), and Nsight found the kernel bound by
instruction issue with DRAM at a fifth of its bandwidth (reports/bench/cuda-sm90/
issue28-stage/, issue28-split/). This kernel spends its instructions on the bytes instead:

- a block per (chunk of keys, KV head, row) of ``NW`` warps; the group's ``G`` queries,
  times ``scale * log2(e)``, sit in shared memory as floats;
- a warp takes 32 keys at a time, **a key a lane**: each lane reads its key's row in
  16-byte loads and forms the ``G`` scores over all ``D`` dims itself (no shuffles);
- one online-softmax update per 32 keys: a warp max and a warp sum per query head, the
  tile's probabilities to shared memory, one rescale of the outputs;
- then the value rows in MLX's lane layout (lane ``l`` owns dims ``D / 32 * l ..``),
  each row read once for the group, ``o += p * v`` for every head;
- the block's warps merge in shared memory; with one chunk the block writes the output,
  else its partial (max, sum, unnormalised output), which
  ``quantized_decode.combine_chunks`` combines in chunk order.

It is deterministic (a fixed order for every call shape), float32 throughout, and not
MLX's bits: fast on a GPU is judged by KL against the oracle already (unmasked against
masked attention), and ``FAST_KL_GATE_GPU_16BIT`` holds this kernel to the same bound.
It takes the calls ``grouped_decode.takes`` sends to the grouped kernel, and nothing on
the CPU. On the H200 (reports/bench/cuda-sm90/issue28-tiled/) its error against float32
attention was MLX's own (``tiled_probe.py accuracy``), fast with it stayed within KL 4e-4
of fast with the looped kernel, and a call at llama-3.1-8b's heads, B=256, 192 keys took
~100 us against the looped kernel's ~145.
"""

from __future__ import annotations

import functools
import math

import mlx.core as mx

from batchlab.engine.kernels.decode_streams import NEG_INF_HEADER, scale_array
from batchlab.engine.kernels.quantized_decode import combine_chunks

# Warps a block, by the blocks a call launches (tools/h200/tiled_sweep.py and
# tiled_probe.py time on the H200, s43): one where rows x KV heads fill the device many
# times over (B=256: 1, 2 and 4 timed, 1 the fastest), two below (B 1-64: 2 at or near
# the best of 2, 4 and 8 at every shape timed).
WARPS = 1
FEW_BLOCK_WARPS = 2
MANY_BLOCKS = 1024
TILE = 32  # keys a warp scores at a time: one a lane
TARGET_BLOCKS = 2048  # where rows x KV heads are few, chunks until ~16 blocks an SM (132)
MIN_CHUNK = 256  # keys: no chunk under 256 (a few tiles a warp)
KEY_LOADS = 2  # 16-byte loads of a key row in flight a lane (4 registers each)
VALUE_LOADS = 8  # value rows in flight a warp (8 x D / 32 elements a lane)
LN2 = 0.6931471805599453  # partial maxima leave in natural-log units for combine_chunks

HELPERS = """__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
"""

_BODY = """
    constexpr int VE = 16 / sizeof(T);       // elements in a 16-byte load
    constexpr int VPT = D / 32;              // value dims a lane owns
    constexpr int VB = VPT * sizeof(T);
    constexpr int VA = (VB & -VB) > 16 ? 16 : (VB & -VB);
    static_assert((D / VE) % KL == 0 && TILE % VL == 0, "whole load batches");
    struct alignas(16) Chunk16 { T v[VE]; };
    struct alignas(VA) Vec { T v[VPT]; };
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int c = blockIdx.x;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int n_q_heads = q_shape[1];
    const int n_chunks = gridDim.x;
    const int keys = k_shape[2];
    const int chunk = (keys + n_chunks - 1) / n_chunks;
    const int start = min(keys, c * chunk);
    const int end = min(keys, start + chunk);
    const float scale_log2 = scale[0] * 1.4426950408889634f;
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    // 16-byte key loads and VPT-element value loads need aligned, contiguous rows
    const bool kvec = k_strides[3] == 1 && (k_strides[2] % VE) == 0
        && (reinterpret_cast<unsigned long long>(kb) % 16) == 0;
    const bool vvec = v_strides[3] == 1 && (v_strides[2] % VPT) == 0
        && (reinterpret_cast<unsigned long long>(vb) % VA) == 0;

    __shared__ float sq[G][D];
    __shared__ float sp[NW][TILE][G];
    __shared__ float sm_m[NW][G];
    __shared__ float sm_l[NW][G];
    __shared__ float sm_o[NW][G][D];
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int j = idx / D;
        const int d = idx % D;
        const T* qp = q + b * q_strides[0] + (g * G + j) * q_strides[1];
        sq[j][d] = static_cast<float>(qp[d * q_strides[3]]) * scale_log2;
    }
    __syncthreads();

    float m[G];
    float l[G];
    float o[G][VPT];
#pragma unroll
    for (int j = 0; j < G; ++j) {
        m[j] = NEG_INF;
        l[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) o[j][i] = 0.0f;
    }
    for (int t = start + warp * TILE; t < end; t += NW * TILE) {
        const int r = t + lane;
        const bool ok = r < end;
        float s[G];
#pragma unroll
        for (int j = 0; j < G; ++j) s[j] = 0.0f;
        if (ok) {
            const T* kr = kb + r * k_strides[2];
            // KL 16-byte loads issued together, then their arithmetic: loads behind a
            // branch are not hoisted, and one at a time a tile costs dozens of round trips
#pragma unroll
            for (int c0 = 0; c0 < D / VE; c0 += KL) {
                Chunk16 w[KL];
                if (kvec) {
#pragma unroll
                    for (int x = 0; x < KL; ++x) {
                        w[x] = *reinterpret_cast<const Chunk16*>(kr + (c0 + x) * VE);
                    }
                } else {
                    for (int x = 0; x < KL; ++x) {
                        for (int e = 0; e < VE; ++e) {
                            w[x].v[e] = kr[((c0 + x) * VE + e) * k_strides[3]];
                        }
                    }
                }
#pragma unroll
                for (int x = 0; x < KL; ++x) {
#pragma unroll
                    for (int e = 0; e < VE; ++e) {
                        const float kf = static_cast<float>(w[x].v[e]);
                        const int d = (c0 + x) * VE + e;
#pragma unroll
                        for (int j = 0; j < G; ++j) s[j] = fmaf(sq[j][d], kf, s[j]);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < G; ++j) {
            const float sj = ok ? s[j] : NEG_INF;
            const float mn = fmaxf(m[j], warp_max(sj));  // finite: lane 0's key is in range
            const float corr = ex2_approx(m[j] - mn);
            const float p = ok ? ex2_approx(sj - mn) : 0.0f;
            l[j] = l[j] * corr + warp_sum(p);
            m[j] = mn;
            sp[warp][lane][j] = p;
#pragma unroll
            for (int i = 0; i < VPT; ++i) o[j][i] *= corr;
        }
        __syncwarp();
        const int here = min(TILE, end - t);
        for (int u0 = 0; u0 < here; u0 += VL) {
            // VL value rows loaded together (a row past the tile reads its last, unused)
            Vec w[VL];
            if (vvec) {
#pragma unroll
                for (int x = 0; x < VL; ++x) {
                    const T* vr = vb + (t + min(u0 + x, here - 1)) * v_strides[2];
                    w[x] = *reinterpret_cast<const Vec*>(vr + VPT * lane);
                }
            } else {
                for (int x = 0; x < VL; ++x) {
                    const T* vr = vb + (t + min(u0 + x, here - 1)) * v_strides[2];
                    for (int i = 0; i < VPT; ++i) w[x].v[i] = vr[(VPT * lane + i) * v_strides[3]];
                }
            }
#pragma unroll
            for (int x = 0; x < VL; ++x) {
                if (u0 + x < here) {  // uniform over the warp
#pragma unroll
                    for (int j = 0; j < G; ++j) {
                        const float p = sp[warp][u0 + x][j];
#pragma unroll
                        for (int i = 0; i < VPT; ++i) {
                            o[j][i] = fmaf(p, static_cast<float>(w[x].v[i]), o[j][i]);
                        }
                    }
                }
            }
        }
        __syncwarp();
    }

    if (lane == 0) {
        for (int j = 0; j < G; ++j) {
            sm_m[warp][j] = m[j];
            sm_l[warp][j] = l[j];
        }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) sm_o[warp][j][VPT * lane + i] = o[j][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int j = idx / D;
        const int d = idx % D;
        float big = NEG_INF;
        for (int w = 0; w < NW; ++w) big = fmaxf(big, sm_m[w][j]);
        float total = 0.0f;
        float acc = 0.0f;
        if (big != NEG_INF) {
            for (int w = 0; w < NW; ++w) {
                const float f = ex2_approx(sm_m[w][j] - big);
                total += sm_l[w][j] * f;
                acc += sm_o[w][j][d] * f;
            }
        }
        const int h = g * G + j;
"""

_WRITE_OUT = """        const float res = total > 0.0f ? acc / total : 0.0f;
        out[(b * n_q_heads + h) * D + d] = static_cast<T>(res);
    }
"""

_WRITE_PARTIAL = """        const int row = (b * n_q_heads + h) * n_chunks + c;
        part_acc[row * D + d] = acc;
        if (d == 0) {
            part_m[row] = big == NEG_INF ? NEG_INF : big * LN2F;
            part_l[row] = total;
        }
    }
"""

SOURCE_ONE = _BODY + _WRITE_OUT
SOURCE_PARTIAL = _BODY + _WRITE_PARTIAL
HEADER = NEG_INF_HEADER + f"#define LN2F {LN2!r}f\n" + HELPERS


@functools.cache
def _kernel(partial: bool):  # not gated: gpu only
    outputs = ["part_m", "part_l", "part_acc"] if partial else ["out"]
    return mx.fast.cuda_kernel(
        name=f"batchlab_grouped_decode_tiled_{'partial' if partial else 'one'}",
        input_names=["q", "k", "v", "scale"], output_names=outputs,
        source=SOURCE_PARTIAL if partial else SOURCE_ONE, header=HEADER,
        ensure_row_contiguous=False)


def num_chunks(rows: int, kv_heads: int, width: int) -> int:  # not gated: gpu only
    """Chunks of keys per (row, KV head): enough blocks to fill the device, none under
    ``MIN_CHUNK`` keys; one wherever the rows and heads fill it alone (no second launch)."""
    want = math.ceil(TARGET_BLOCKS / max(1, rows * kv_heads))
    return max(1, min(want, math.ceil(width / MIN_CHUNK)))


def warps_for(rows: int, kv_heads: int) -> int:  # not gated: gpu only
    """Warps a block: ``WARPS`` from ``MANY_BLOCKS`` (row, KV head) blocks, else
    ``FEW_BLOCK_WARPS``."""
    return WARPS if rows * kv_heads >= MANY_BLOCKS else FEW_BLOCK_WARPS


def tiled_decode_attention(  # not gated: gpu only
        queries: mx.array, keys: mx.array, values: mx.array, scale: float,
        warps: int | None = None) -> mx.array:
    """softmax(q . K^T * scale) . V for one query per row, ``keys`` / ``values``
    ``(B, H_kv, N, D)`` as the cache served them; float32 inside, the model's dtype out.
    ``warps`` a block (default ``warps_for``; 1 to 8), for the probes."""
    b, n_q, _, dim = queries.shape
    n_kv, width = keys.shape[1], keys.shape[2]
    chunks = num_chunks(b, n_kv, width)
    warps = warps or warps_for(b, n_kv)
    template = [("T", queries.dtype), ("D", dim), ("G", n_q // n_kv), ("NW", warps),
                ("TILE", TILE), ("KL", KEY_LOADS), ("VL", VALUE_LOADS)]
    launch = {"inputs": [queries, keys, values, scale_array(scale)], "template": template,
              "grid": (32 * warps * chunks, n_kv, b), "threadgroup": (32 * warps, 1, 1)}
    if chunks == 1:
        return _kernel(False)(output_shapes=[(b, n_q, 1, dim)],
                              output_dtypes=[queries.dtype], **launch)[0]
    part_m, part_l, part_acc = _kernel(True)(
        output_shapes=[(b, n_q, chunks), (b, n_q, chunks), (b, n_q, chunks, dim)],
        output_dtypes=[mx.float32, mx.float32, mx.float32], **launch)
    return combine_chunks(part_m, part_l, part_acc, queries.dtype)

"""One decode row's layer as four kernels (CUDA): ``fast``'s step of one row, opt-in.

A decode step of one row is bound by the host on the H200: MLX builds, encodes and
launches some 230 kernels for llama-3.2-1b's step, and the small ones (norms, RoPE,
residual adds, silu * up, copies) cost as much device time as their launches
(reports/bench/cuda-sm90/issue28-one-row/). These kernels fold each layer's chain of
vector ops into the matrix-vector products next to it:

- ``norm_qkv``: RMS norm of the hidden state, the q, k and v products, and RoPE of q and
  k by the step's cosines and sines (``rotation``: llama's RoPE; models whose heads are
  normalised first, qwen3, rotate with MLX's ops after it);
- ``residual_product``: ``h + W a`` (o_proj after attention, down_proj after the MLP);
- ``norm_swiglu``: RMS norm, the gate and up products, and ``silu(gate) * up``.

A normalising kernel's block first puts its input in shared memory, normalised as MLX's
``rms_norm`` rounds it (``w * T(x * rsqrt(mean(x^2) + eps))``); ``residual_product``
reads its input where it is. A pair of output rows belongs to ``S`` warps, each summing
a slice of K (``slices_for``: enough warps to fill the device), with ``LOADS`` 16-byte
weight loads of each row issued together; the slices' float32 sums are added in slice
order. A pair is a RoPE pair (``i`` and ``i + Dh / 2`` of a head), two neighbours, or a
gate row and its up row. Every output is rounded to the
model's dtype where MLX's op would round it (the product, then RoPE, the residual add,
silu, the product of silu and up), so only the sums' order differs from MLX's kernels;
that is not MLX's bits, so ``fast`` on a GPU stays judged by KL against the oracle.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from batchlab.engine.kernels.grouped_decode_tiled import HELPERS

WARPS = 8  # warps a block
LOADS = 8  # 16-byte loads of each of a warp's two rows issued together
# warps a launch aims for: the H200's 132 SMs x 64 resident warps, at the 32 registers
# ptxas gives these kernels (it holds ~4 loads in flight a warp, so the bytes in flight
# come from many warps, not from deep batches)
TARGET_WARPS = 8192
MAX_STAGED_BYTES = 32 * 1024  # the normalised input a block keeps in shared memory

HEADER = HELPERS + """
template <typename T> struct alignas(16) Vec16 { T v[16 / sizeof(T)]; };

// A weight chunk: read once, so it bypasses L1 (the input vector's chunks stay there).
template <typename T>
__device__ __forceinline__ Vec16<T> load_weight(const Vec16<T>* p) {
    Vec16<T> r;
    unsigned* u = reinterpret_cast<unsigned*>(&r);
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p));
    return r;
}

// An input chunk. FRESH: data another block wrote in this launch (row_step), read
// through L2 (ld.global.cg), never a stale L1 line.
template <bool FRESH, typename T>
__device__ __forceinline__ Vec16<T> load_input(const Vec16<T>* p) {
    if constexpr (FRESH) {
        Vec16<T> r;
        unsigned* u = reinterpret_cast<unsigned*>(&r);
        asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p) : "memory");
        return r;
    } else {
        return *p;
    }
}

// MLX's rms_norm's factor for the block's input: rsqrt(mean(x^2) + eps), summed by
// every thread of the block in a fixed order. Call from every thread.
template <typename T, int K, bool FRESH = false>
__device__ __forceinline__ float rms_factor(const T* x, float eps, float* red) {
    constexpr int NCH = K / (16 / sizeof(T));
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    float ss = 0.0f;
    for (int c = threadIdx.x; c < NCH; c += blockDim.x) {
        const Vec16<T> v = load_input<FRESH>(xv + c);
#pragma unroll
        for (int e = 0; e < (int)(16 / sizeof(T)); ++e) {
            const float t = static_cast<float>(v.v[e]);
            ss += t * t;
        }
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += red[w];
    return rsqrtf(total / K + eps);
}

// One 16-byte chunk of the input into both rows' float sums.
template <typename T>
__device__ __forceinline__ void fma_chunk(const Vec16<T>& a, const Vec16<T>& b,
                                          const Vec16<T>& x, float& s0, float& s1) {
#pragma unroll
    for (int e = 0; e < (int)(16 / sizeof(T)); ++e) {
        const float xf = static_cast<float>(x.v[e]);
        s0 = fmaf(static_cast<float>(a.v[e]), xf, s0);
        s1 = fmaf(static_cast<float>(b.v[e]), xf, s1);
    }
}

// The block's input normalised as MLX's rms_norm rounds it (w * T(x * factor)) into
// shared memory, once for all the block's rows. Call from every thread.
template <typename T, int K>
__device__ __forceinline__ void stage_normalised(const T* x, const T* nw, float rs, T* xs) {
    constexpr int NCH = K / (16 / sizeof(T));
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    const Vec16<T>* wv = reinterpret_cast<const Vec16<T>*>(nw);
    Vec16<T>* sv = reinterpret_cast<Vec16<T>*>(xs);
    for (int c = threadIdx.x; c < NCH; c += blockDim.x) {
        Vec16<T> v = xv[c];
        const Vec16<T> w = wv[c];
#pragma unroll
        for (int e = 0; e < (int)(16 / sizeof(T)); ++e) {
            const T y = static_cast<T>(static_cast<float>(v.v[e]) * rs);
            v.v[e] = static_cast<T>(static_cast<float>(w.v[e]) * static_cast<float>(y));
        }
        sv[c] = v;
    }
    __syncthreads();
}

// Two weight rows' dot products with the input `x` (global or shared memory), over
// slice `slice` of S: lane l of the warp takes 16-byte chunks l + 32 (slice + S i), LD of
// each row loaded together before their arithmetic, the last partial round guarded;
// summed over the warp.
template <typename T, int K, int S, int LD>
__device__ __forceinline__ void two_dots(const T* w0, const T* w1, const T* x, int slice,
                                         float& d0, float& d1) {
    constexpr int NCH = K / (16 / sizeof(T));
    constexpr int ROUNDS = NCH / (32 * S);  // chunks every lane of every slice has
    constexpr int BATCHED = ROUNDS / LD * LD;
    const int lane = threadIdx.x & 31;
    const Vec16<T>* a0 = reinterpret_cast<const Vec16<T>*>(w0);
    const Vec16<T>* a1 = reinterpret_cast<const Vec16<T>*>(w1);
    const Vec16<T>* xv = reinterpret_cast<const Vec16<T>*>(x);
    const int first = lane + 32 * slice;
    float s0 = 0.0f;
    float s1 = 0.0f;
#pragma unroll 1
    for (int base = 0; base < BATCHED; base += LD) {
        Vec16<T> r0[LD];
        Vec16<T> r1[LD];
#pragma unroll
        for (int i = 0; i < LD; ++i) {
            const int c = first + 32 * S * (base + i);
            r0[i] = load_weight(a0 + c);
            r1[i] = load_weight(a1 + c);
        }
#pragma unroll
        for (int i = 0; i < LD; ++i) {
            fma_chunk<T>(r0[i], r1[i], xv[first + 32 * S * (base + i)], s0, s1);
        }
    }
#pragma unroll
    for (int i = BATCHED; i < ROUNDS; ++i) {
        const int c = first + 32 * S * i;
        fma_chunk<T>(load_weight(a0 + c), load_weight(a1 + c), xv[c], s0, s1);
    }
    const int c = first + 32 * S * ROUNDS;
    if (NCH % (32 * S) != 0 && c < NCH) {
        fma_chunk<T>(load_weight(a0 + c), load_weight(a1 + c), xv[c], s0, s1);
    }
    d0 = warp_sum(s0);
    d1 = warp_sum(s1);
}

// The block's pairs of rows, S warps a pair: each warp's two sums to shared memory, then
// lane 0 of the pair's first warp adds them in slice order (`done` true there).
template <int S>
__device__ __forceinline__ bool gather_slices(float d0, float d1, float (*part)[2],
                                              float& t0, float& t1) {
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        part[warp][0] = d0;
        part[warp][1] = d1;
    }
    __syncthreads();
    if ((threadIdx.x & 31) != 0 || warp % S != 0) return false;
    t0 = 0.0f;
    t1 = 0.0f;
    for (int s = 0; s < S; ++s) {
        t0 += part[warp + s][0];
        t1 += part[warp + s][1];
    }
    return true;
}
"""

# The three kernels share one frame: a block of NW warps holds NW / S pairs of rows, S
# warps a pair (a slice of K each), `unit` the pair's index; every thread reaches the
# block's barriers, and a pair past the end sums zeros and writes nothing.
_FRAME = """
    constexpr int NW_ = 32;
    __shared__ float red[NW_];
    __shared__ float part[NW_][2];
    const int warp = threadIdx.x >> 5;
    const int unit = blockIdx.x * ((blockDim.x >> 5) / S) + warp / S;
    const bool live = unit < UNITS;
"""

# inputs: x, norm_w, eps, wq, wk, wv, rot_cos, rot_sin; outputs: q, k, v
NORM_QKV_SOURCE = _FRAME + """
    __shared__ alignas(16) T xs[K];
    stage_normalised<T, K>(x, norm_w, rms_factor<T, K>(x, eps[0], red), xs);
    constexpr int HALF = HD / 2;
    const int head = live ? unit / HALF : 0;
    const int i = live ? unit % HALF : 0;
    const T* w = wq;
    T* o = q;
    int hh = head;
    if (head >= NQ + NKV) {
        w = wv; o = v; hh = head - NQ - NKV;
    } else if (head >= NQ) {
        w = wk; o = k; hh = head - NQ;
    }
    const long long r0 = (long long)hh * HD + i;
    float d0 = 0.0f, d1 = 0.0f;
    if (live) two_dots<T, K, S, LD>(w + r0 * K, w + (r0 + HALF) * K, xs, warp % S, d0, d1);
    float t0, t1;
    if (gather_slices<S>(d0, d1, part, t0, t1) && live) {
        float x1 = static_cast<float>(static_cast<T>(t0));
        float x2 = static_cast<float>(static_cast<T>(t1));
        if (ROPE && head < NQ + NKV) {  // MLX's rope_single_impl, non-traditional
            const float c = rot_cos[i];
            const float s = rot_sin[i];
            const float y1 = x1 * c - x2 * s;
            const float y2 = x1 * s + x2 * c;
            x1 = y1;
            x2 = y2;
        }
        o[r0] = static_cast<T>(x1);
        o[r0 + HALF] = static_cast<T>(x2);
    }
"""

# inputs: h, w, a; output: out = h + T(w a)
RESIDUAL_SOURCE = _FRAME + """
    const long long r0 = 2LL * (live ? unit : 0);
    float d0 = 0.0f, d1 = 0.0f;
    if (live) two_dots<T, K, S, LD>(w + r0 * K, w + (r0 + 1) * K, a, warp % S, d0, d1);
    float t0, t1;
    if (gather_slices<S>(d0, d1, part, t0, t1) && live) {
        out[r0] = static_cast<T>(static_cast<float>(h[r0])
                                 + static_cast<float>(static_cast<T>(t0)));
        out[r0 + 1] = static_cast<T>(static_cast<float>(h[r0 + 1])
                                     + static_cast<float>(static_cast<T>(t1)));
    }
"""

# inputs: h, norm_w, eps, wg, wu; output: out = silu(T(wg xn)) * T(wu xn)
NORM_SWIGLU_SOURCE = _FRAME + """
    __shared__ alignas(16) T xs[K];
    stage_normalised<T, K>(h, norm_w, rms_factor<T, K>(h, eps[0], red), xs);
    const long long j = live ? unit : 0;
    float d0 = 0.0f, d1 = 0.0f;
    if (live) two_dots<T, K, S, LD>(wg + j * K, wu + j * K, xs, warp % S, d0, d1);
    float g, u;
    if (gather_slices<S>(d0, d1, part, g, u) && live) {
        const float gf = static_cast<float>(static_cast<T>(g));
        const T sig = static_cast<T>(1.0f / (1.0f + expf(-gf)));
        const T act = static_cast<T>(gf * static_cast<float>(sig));
        out[j] = static_cast<T>(static_cast<float>(act)
                                * static_cast<float>(static_cast<T>(u)));
    }
"""

KERNELS = {  # name: (inputs, outputs, source)
    "norm_qkv": (("x", "norm_w", "eps", "wq", "wk", "wv", "rot_cos", "rot_sin"),
                 ("q", "k", "v"), NORM_QKV_SOURCE),
    "residual": (("h", "w", "a"), ("out",), RESIDUAL_SOURCE),
    "norm_swiglu": (("h", "norm_w", "eps", "wg", "wu"), ("out",), NORM_SWIGLU_SOURCE),
}


def fits(dtype: mx.Dtype, k: int) -> bool:  # not gated: gpu only
    """Whether an input of ``k`` elements of ``dtype`` is whole 16-byte chunks."""
    return k % (16 // dtype.size) == 0


def stages(dtype: mx.Dtype, k: int) -> bool:  # not gated: gpu only
    """Whether a normalised input of ``k`` elements fits the block's shared memory."""
    return k * dtype.size <= MAX_STAGED_BYTES


def slices_for(units: int, k: int, dtype: mx.Dtype) -> int:  # not gated: gpu only
    """Warps a pair of rows (a slice of K each): the largest power of two up to ``WARPS``
    that keeps the launch within ``TARGET_WARPS`` and gives every warp a chunk a lane."""
    chunks = k // (16 // dtype.size)
    s = 1
    while 2 * s <= WARPS and units * 2 * s <= TARGET_WARPS and 32 * 2 * s <= chunks:
        s *= 2
    return s


@functools.cache
def _kernel(name: str):  # not gated: gpu only
    inputs, outputs, source = KERNELS[name]
    return mx.fast.cuda_kernel(name=f"batchlab_row_chain_{name}", input_names=list(inputs),
                               output_names=list(outputs), source=source, header=HEADER,
                               ensure_row_contiguous=True)


@functools.cache
def _launch_arguments(dtype: mx.Dtype, k: int, units: int, template: tuple, shapes: tuple,
                      slices: int | None = None) -> dict:  # not gated: gpu only
    """A launch's keyword arguments, made once per shape (a decode step makes 64 calls)."""
    slices = slices or slices_for(units, k, dtype)
    blocks = -(-units // (WARPS // slices))
    return {"template": [("T", dtype), ("LD", LOADS), ("S", slices), ("K", k),
                         ("UNITS", units), *template],
            "grid": (blocks * 32 * WARPS, 1, 1), "threadgroup": (32 * WARPS, 1, 1),
            "output_shapes": list(shapes), "output_dtypes": [dtype] * len(shapes)}


def _launch(name: str, inputs: list, template: tuple, units: int, k: int, shapes: tuple,
            dtype: mx.Dtype, slices: int | None = None) -> list[mx.array]:  # not gated: gpu only
    return _kernel(name)(inputs=inputs,
                         **_launch_arguments(dtype, k, units, template, shapes, slices))


def rope_inverse_frequencies(rope) -> mx.array | None:  # not gated: gpu only
    """The float32 angle per position of each RoPE pair, for ``norm_qkv``; ``None`` where
    the module is not one this kernel reproduces (traditional RoPE, partial rotation, a
    scaled output): the caller rotates with the module then."""
    from mlx import nn
    from mlx_lm.models.rope_utils import Llama3RoPE

    if type(rope) is Llama3RoPE and not rope.traditional:
        freqs = np.array(rope._freqs.astype(mx.float32), dtype=np.float64)
        return mx.array((1.0 / freqs).astype(np.float32))
    if type(rope) is nn.RoPE and not rope.traditional:
        half = rope.dims // 2
        exponent = np.arange(half, dtype=np.float32) / np.float32(half)
        inv = np.exp2(-exponent * np.float32(np.log2(rope.base)), dtype=np.float32)
        return mx.array((inv * np.float32(rope.scale)).astype(np.float32))
    return None


def rotation(offset: mx.array,  # not gated: gpu only
             inv_freq: mx.array) -> tuple[mx.array, mx.array]:
    """The cosines and sines of a row's RoPE angles (``offset`` ``(1,)``), made once a step
    for every layer: MLX's RoPE kernel takes ``cos`` / ``sin`` of ``offset * inv_freq``
    in float32; inside ``norm_qkv`` they kept a stack frame and slowed every call
    (reports/bench/cuda-sm90/issue28-chain/)."""
    theta = offset.astype(mx.float32) * inv_freq
    return mx.cos(theta), mx.sin(theta)


def norm_qkv(x: mx.array, norm_w: mx.array, eps: mx.array, wq: mx.array, wk: mx.array,
             wv: mx.array, heads: tuple[int, int, int],
             rotate: tuple[mx.array, mx.array] | None, slices: int | None = None
             ) -> list[mx.array]:  # not gated: gpu only
    """q ``(1, NQ, 1, Dh)``, k and v ``(1, NKV, 1, Dh)`` of one row's hidden state ``x``
    ``(1, K)``; q and k rotated by ``rotate`` (``rotation``'s cosines and sines) if given."""
    n_q, n_kv, dim = heads
    rope = rotate is not None
    template = (("HD", dim), ("NQ", n_q), ("NKV", n_kv), ("ROPE", int(rope)))
    return _launch("norm_qkv", [x, norm_w, eps, wq, wk, wv, *(rotate if rope else (eps, eps))],
                   template, (n_q + 2 * n_kv) * dim // 2, x.shape[-1],
                   ((1, n_q, 1, dim), (1, n_kv, 1, dim), (1, n_kv, 1, dim)), x.dtype, slices)


def residual_product(h: mx.array, w: mx.array, a: mx.array,
                     slices: int | None = None) -> mx.array:  # not gated: gpu only
    """``h + w a`` for one row: ``h`` ``(1, N)``, ``w`` ``(N, K)``, ``a`` ``(1, K)``."""
    n = w.shape[0]
    return _launch("residual", [h, w, a], (), n // 2, w.shape[1], ((1, n),), h.dtype,
                   slices)[0]


def norm_swiglu(h: mx.array, norm_w: mx.array, eps: mx.array, wg: mx.array, wu: mx.array,
                slices: int | None = None) -> mx.array:  # not gated: gpu only
    """``silu(gate(norm(h))) * up(norm(h))`` for one row ``h`` ``(1, K)``."""
    n = wg.shape[0]
    return _launch("norm_swiglu", [h, norm_w, eps, wg, wu], (), n, h.shape[-1], ((1, n),),
                   h.dtype, slices)[0]

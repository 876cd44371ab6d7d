"""Decode attention that reads each KV head once for its query group (CUDA, ``fast``): by
default in its own float order (``grouped_decode_tiled.py``, ``TILED``), else with MLX's
bits (the layouts below, ``BATCHLAB_GQA_TILED=0``).

MLX's fused decode attention on CUDA (``kernel_sdpav_1pass`` in
``mlx/backend/cuda/scaled_dot_product_attention.cu``, mlx 0.32.4) runs a block of 32
warps per *query* head, so under GQA each KV head's keys and values are read once per
query head: most of a large-B decode step's attention time (docs/performance.md). This
kernel runs a block per (row, KV head) that loads each key and value once and puts every
query head of the group through exactly the float operations MLX's kernel performs for
it, in the same order (read off the sm_90a machine code of the wheel's kernel), so its
output equals ``mx.fast.scaled_dot_product_attention``'s bit for bit:

- the query is ``scale * log2(e)`` (that product in double, rounded to float) times
  each element; warp ``w`` of 32 takes keys ``w, w + 32, ...`` in order, lane ``l`` dims
  ``vpt * l .. vpt * l + vpt - 1`` (``vpt = D / 32``);
- a key's score is ``fma(q_i, k_i, s)`` over the lane's dims from 0, then a butterfly
  sum over the warp (xor 16, 8, 4, 2, 1); per key ``m' = max(m, s)``,
  ``f = exp2(m - m')``, ``e = exp2(s - m')``, ``l = fma(f, l, e)``,
  ``o_i = fma(f, o_i, e * v_i)`` (``exp2`` is ``ex2.approx.f32``), from ``m`` = the
  lowest finite float, ``l = o = 0``;
- the 32 warps merge through shared memory: a butterfly max of ``m``, per warp
  ``f = exp2(m - M)``, butterfly sums of ``l * f`` and of ``o * f`` over the warps,
  times ``__frcp_rn`` of the first (0 where it is 0), rounded to the model dtype.

Every operation is spelled as an intrinsic (``__fmaf_rn``, ``__fmul_rn``, ...), so the
compiler cannot contract or reorder it. Calls come here where the kernel can take them
(``fits``: one query, no mask, no sinks, head dim 64, 96 or 128) and ``takes`` them:

- below 256 keys MLX runs that kernel too, so this one is there for speed alone: only
  calls of at least ``MIN_BLOCKS`` blocks come here (the same bits either way);
- from 256 keys MLX decodes through cuDNN when the keys are a slice of a cache grown in
  steps of 256, as BatchKV's are, and cuDNN's decode attention does not repeat itself:
  the same call on the same arrays gave different bytes on the H200 at 32 query heads
  over 8 (``tools/h200/cudnn_decode_probe.py``, reports/bench/cuda-sm90/issue28-repeat/).
  So every call from 256 keys comes here, at any block count, and the path's decode
  repeats itself. Up to 1023 keys its bits are those of MLX's one-pass kernel (MLX's
  choice with cuDNN switched off: ``MLX_CUDA_USE_CUDNN_SDPA=0``); from 1024 keys MLX's
  own choice is a two-pass kernel, whose rounding this one-pass kernel need not share.

Three layouts of that arithmetic: ``simple`` (this file: MLX's lanes, each query head of
the group on the whole warp) and ``staged`` (``grouped_decode_staged.py``: a lane group
per query head, loads through ``cp.async``; the default before ``looped``, where the
group is a power of two). Both matched MLX on the H200 (tools/h200/gqa_exact_probe.py,
reports/bench/cuda-sm90/issue28-465ce3b/); their fallbacks for keys and values that are
not 16-byte aligned (never the case for BatchKV's slices) did not run there. The third,
``looped`` (``grouped_decode_looped.py``: ``simple``'s lanes, W = 8 or 16 warps a block
each running 32 / W of the 32 streams, the merge through shared memory), is the default:
it matched MLX on every shape the probe checks and ran 1.2-1.5x faster than ``staged``
at llama-3.1-8b's heads (reports/bench/cuda-sm90/issue28-looped/).

``BATCHLAB_GQA_LAYOUT`` (``simple``, ``staged`` or ``looped``) replaces ``layout_for``'s
choice, ``BATCHLAB_GQA_WARPS`` (4, 8 or 16) ``looped.warps_for``'s and
``BATCHLAB_GQA_RING`` (0, 2, 4 or 8) ``looped.RING``, ``BATCHLAB_GQA_STAGE`` and
``BATCHLAB_GQA_SPLIT`` (0 or 1) ``looped.STAGE`` and ``looped.SPLIT``, for every call
that names none (each read once at import; ``staged`` only where the group is a power
of two, else ``simple``), so one session can time a layout against the default.
``BATCHLAB_GQA_TILED`` (0 or 1) replaces ``TILED``: whether the calls go to
``grouped_decode_tiled.py`` (fast's own float order, not MLX's bits; the default, for the
issue-bound cost of MLX's per-key arithmetic) or to these layouts.
"""

from __future__ import annotations

import functools
import os

import mlx.core as mx

from batchlab.engine.kernels import grouped_decode_looped as looped
from batchlab.engine.kernels import grouped_decode_staged as staged
from batchlab.engine.kernels import grouped_decode_tiled as tiled
from batchlab.engine.kernels.decode_streams import MLX_KEY_UPDATE, MLX_QUERY_STATE, scale_array

WARPS = 32  # MLX's BN: warps per block, one key stream each
CUDNN_KEYS = 256  # from here MLX may decode through cuDNN, which does not repeat itself
HEAD_DIMS = (64, 96, 128)  # MLX's dispatch_headdim
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
MAX_STATE = 16  # query heads x dims a lane owns: 1024 threads leave 64 registers each
LAYOUT = "looped"  # the kernel's layout (layout_for); staged needs a power-of-two group
# Below one block per SM (132 on the H200) MLX's kernel, with G times as many blocks,
# is the faster of the two (B=1: 13 us a call against 23; B=64: 85 against 76); the bits
# are the same either way, so this is speed alone.
MIN_BLOCKS = 128

# 1024 threads a block: the registers must fit (64 a thread), so the kernel says so
# (mx.fast.cuda_kernel writes the signature itself; the header comes just before it).
_BOUNDS = """
#undef __global__
#define __global__ __location__(global) __launch_bounds__(1024)
"""
_HELPERS = """__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
__device__ __forceinline__ float warp_max(float x) {  // cg::greater, NaN and -0 included
    for (int off = 16; off > 0; off >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, off);
        x = (x < y) ? y : x;
    }
    return x;
}
"""
_HEADER = _BOUNDS + _HELPERS
LAYOUTS = ("simple", "staged", "looped")


def _forced_layout() -> str | None:
    """``BATCHLAB_GQA_LAYOUT``, checked (read once, at import: module docstring)."""
    name = os.environ.get("BATCHLAB_GQA_LAYOUT", "").strip()
    if name and name not in LAYOUTS:  # not gated: gpu only
        raise ValueError(f"BATCHLAB_GQA_LAYOUT={name!r}: one of {', '.join(LAYOUTS)}")
    return name or None


def _forced_warps() -> int | None:
    """``BATCHLAB_GQA_WARPS``, checked (read once, at import: module docstring)."""
    name = os.environ.get("BATCHLAB_GQA_WARPS", "").strip()
    known = not name or (name.isdigit() and int(name) in looped.STAGE_WARP_CHOICES)
    if not known:  # not gated: gpu only
        raise ValueError(f"BATCHLAB_GQA_WARPS={name!r}: one of "
                         f"{', '.join(map(str, looped.STAGE_WARP_CHOICES))} (32: staging only)")
    return int(name) if name else None


def _forced_ring() -> int | None:
    """``BATCHLAB_GQA_RING``, checked (read once, at import: module docstring)."""
    name = os.environ.get("BATCHLAB_GQA_RING", "").strip()
    choices = (0, *looped.RING_CHOICES)
    known = not name or (name.isdigit() and int(name) in choices)
    if not known:  # not gated: gpu only
        raise ValueError(f"BATCHLAB_GQA_RING={name!r}: one of {', '.join(map(str, choices))}")
    return int(name) if name else None


def _forced_flag(variable: str) -> bool | None:
    """An on/off switch of the environment (0 or 1), checked (read once, at import:
    module docstring); None where it is not set."""
    name = os.environ.get(variable, "").strip()
    if name not in ("", "0", "1"):  # not gated: gpu only
        raise ValueError(f"{variable}={name!r}: 0 or 1")
    return bool(int(name)) if name else None


def _forced_stage() -> bool | None:
    return _forced_flag("BATCHLAB_GQA_STAGE")


def _forced_split() -> bool | None:
    return _forced_flag("BATCHLAB_GQA_SPLIT")


def _forced_tiled() -> bool | None:
    return _forced_flag("BATCHLAB_GQA_TILED")


def _chosen(*choices):  # not gated: gpu only
    """The first of a call's argument, the environment's switch and the module's default
    that is set."""
    return next(c for c in choices if c is not None)


FORCED_LAYOUT = _forced_layout()
FORCED_SPLIT = _forced_split()
FORCED_STAGE = _forced_stage()
FORCED_WARPS = _forced_warps()
FORCED_RING = _forced_ring()
FORCED_TILED = _forced_tiled()
# fast's own rounding (grouped_decode_tiled.py) in place of MLX's bits: as accurate, the
# CUDA gate passed with it, and llama-3.1-8b's B=256 step is 0.93-0.96x the looped
# kernel's (reports/bench/cuda-sm90/issue28-tiled/)
TILED = True

_SOURCE = """
    constexpr int VPT = D / 32;
    constexpr int VB = VPT * sizeof(T);
    constexpr int VA = (VB & -VB) > 16 ? 16 : (VB & -VB);  // VPT = 3: 6 or 12 bytes
    struct alignas(VA) Vec { T v[VPT]; };
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int n_q_heads = q_shape[1];
    const int keys = k_shape[2];
    // MLX: params.scale * M_LOG2E, a float times a double literal
    const float scale_log2 = static_cast<float>(static_cast<double>(scale[0]) * 1.4426950408889634);
    const bool vec = k_strides[3] == 1 && v_strides[3] == 1
        && (k_strides[2] % VPT) == 0 && (v_strides[2] % VPT) == 0
        && (k_strides[1] % VPT) == 0 && (v_strides[1] % VPT) == 0
        && (k_strides[0] % VPT) == 0 && (v_strides[0] % VPT) == 0;

""" + MLX_QUERY_STATE + """\
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    for (int base = warp; base < keys; base += 32 * U) {
        // the loads of U keys first (a key past the end reads the last one, unused):
        // where the loads sit changes no arithmetic
        Vec kk[U];
        Vec vv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int r = min(base + 32 * u, keys - 1);
            if (vec) {
                kk[u] = *reinterpret_cast<const Vec*>(kb + r * k_strides[2] + VPT * lane);
                vv[u] = *reinterpret_cast<const Vec*>(vb + r * v_strides[2] + VPT * lane);
            } else {
                for (int i = 0; i < VPT; ++i) {
                    kk[u].v[i] = kb[r * k_strides[2] + (VPT * lane + i) * k_strides[3]];
                    vv[u].v[i] = vb[r * v_strides[2] + (VPT * lane + i) * v_strides[3]];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (base + 32 * u >= keys) break;  // uniform over the warp
""" + MLX_KEY_UPDATE + """\
        }
    }

    __shared__ float sm_m[G][32];
    __shared__ float sm_l[G][32];
    __shared__ float sm_o[VPT][32][33];
    if (lane == 0) {
        for (int j = 0; j < G; ++j) {
            sm_m[j][warp] = m[j];
            sm_l[j][warp] = l[j];
        }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < G; ++j) {
        const float mine = sm_m[j][lane];
        const float big = warp_max(mine);
        const float f = ex2_approx(__fsub_rn(mine, big));
        float total = warp_sum(__fmul_rn(sm_l[j][lane], f));
        total = total == 0.0f ? 0.0f : __frcp_rn(total);
        for (int i = 0; i < VPT; ++i) sm_o[i][lane][warp] = o[j][i];
        __syncthreads();
        float res[VPT];
        for (int i = 0; i < VPT; ++i) {
            res[i] = __fmul_rn(warp_sum(__fmul_rn(sm_o[i][warp][lane], f)), total);
        }
        if (lane == 0) {
            T* op = out + (b * n_q_heads + g * G + j) * D + VPT * warp;
            for (int i = 0; i < VPT; ++i) op[i] = static_cast<T>(res[i]);
        }
        __syncthreads();
    }
"""


@functools.cache
def _kernel(layout: str, shared: int, warps: int = WARPS):  # not gated: gpu only
    if layout == "looped":
        # the launch bounds name W: one kernel name a W (W is a template argument, so
        # MLX's kernel name, its JIT cache key, differs with it too); and the shared
        # memory: MLX sets a kernel's limit once, when it first loads it
        return mx.fast.cuda_kernel(
            name=f"batchlab_grouped_decode_looped_w{warps}_s{shared}",
            input_names=["q", "k", "v", "scale"], output_names=["out"],
            source=looped.SOURCE, header=looped.bounds(warps) + _HELPERS,
            ensure_row_contiguous=False, shared_memory=shared)
    source = staged.SOURCE if layout == "staged" else _SOURCE
    return mx.fast.cuda_kernel(
        name=f"batchlab_grouped_decode_{layout}", input_names=["q", "k", "v", "scale"],
        output_names=["out"], source=source, header=_HEADER,
        ensure_row_contiguous=False, shared_memory=shared)


def layout_for(group: int, forced: str | None = None) -> str:  # not gated: gpu only
    """``LAYOUT``, or ``forced`` (default ``BATCHLAB_GQA_LAYOUT``) in its place; ``staged``
    (grouped_decode_staged.py) runs only where the group splits a warp evenly into
    power-of-two lane groups, else ``simple`` (MLX's layout) stands in."""
    chosen = forced or FORCED_LAYOUT or LAYOUT
    pow2 = group & (group - 1) == 0
    return chosen if chosen != "staged" or pow2 else "simple"


def unroll(group: int, dim: int, itemsize: int) -> int:  # not gated: gpu only
    """Keys a warp loads ahead: the most that compile without spilling at 64 registers
    (nvcc 13.0, sm_90a, every head dim and group ``fits`` takes, float32 and bf16)."""
    state = group * (dim // 32)  # query and output floats a lane holds per stream
    if state <= 6 or (state <= 8 and dim == 64):
        return 4
    if state <= 8 or (state <= 12 and itemsize == 2):
        return 2
    return 1


def fits(queries: mx.array, keys: mx.array, values: mx.array, mask,  # not gated: gpu only
         sinks) -> bool:
    """Whether the kernel computes this call as MLX's one-pass vector kernel would and the
    group's state fits the registers: one query, no mask, no sinks, one head dim in
    ``HEAD_DIMS`` for queries, keys and values, one float dtype, at least one key, whole
    groups of at most ``MAX_STATE`` head-dims a lane."""
    b, n_q, n, dim = queries.shape
    n_kv, width = keys.shape[1], keys.shape[2]
    if n != 1 or mask is not None or sinks is not None:
        return False
    if dim not in HEAD_DIMS or keys.shape[-1] != dim or values.shape[-1] != dim:
        return False
    if width < 1 or values.shape[2] != width:
        return False
    if queries.dtype not in DTYPES or keys.dtype != queries.dtype \
            or values.dtype != queries.dtype:
        return False
    if n_q % n_kv or (n_q // n_kv) * (dim // 32) > MAX_STATE:
        return False
    return keys.shape[0] == b and values.shape[1] == n_kv


def takes(rows: int, kv_heads: int, keys: int) -> bool:  # not gated: gpu only
    """Whether a call that ``fits`` comes here: from ``CUDNN_KEYS`` keys always (MLX's
    cuDNN decode does not repeat itself), below that where the kernel's ``rows x
    kv_heads`` blocks fill the device (``MIN_BLOCKS``: the same bits, speed alone)."""
    return keys >= CUDNN_KEYS or rows * kv_heads >= MIN_BLOCKS


def grouped_decode_attention(  # not gated: gpu only
        queries: mx.array, keys: mx.array, values: mx.array, scale: float,
        layout: str | None = None, warps: int | None = None,
        prefetch: bool | None = None, ring: int | None = None,
        stage: bool | None = None, split: bool | None = None,
        tiled_order: bool | None = None) -> mx.array:
    """softmax(q . K^T * scale) . V for one query per row, bit for bit as
    ``mx.fast.scaled_dot_product_attention`` on CUDA (unless ``tiled_order``, default
    ``BATCHLAB_GQA_TILED`` or ``TILED``: ``grouped_decode_tiled.py``'s own rounding,
    which replaces every argument below); ``keys`` / ``values``
    ``(B, H_kv, N, D)`` as the cache served them (a view of its buffer is fine).
    ``layout`` (``simple``, ``staged`` or ``looped``) overrides ``layout_for``, and
    ``warps`` ``looped``'s W (4, 8 or 16, or 32 when staged; default ``BATCHLAB_GQA_WARPS`` or
    ``looped.warps_for``), ``prefetch`` its L2 prefetch (default ``looped.PREFETCH``)
    and ``ring`` its slots a warp (default ``BATCHLAB_GQA_RING`` or ``looped.RING``;
    0: none; always none at head dim 96), ``stage`` whether the block stages every row
    in shared memory first (default ``BATCHLAB_GQA_STAGE`` or ``looped.STAGE``; where
    ``looped.can_stage``; it replaces the ring and the prefetch), ``split`` whether the
    heads' score sums split over the lanes (default ``BATCHLAB_GQA_SPLIT`` or
    ``looped.SPLIT``; where ``looped.can_split``), for the probes."""
    if _chosen(tiled_order, FORCED_TILED, TILED):
        return tiled.tiled_decode_attention(queries, keys, values, scale)
    b, n_q, _, dim = queries.shape
    n_kv = keys.shape[1]
    group = n_q // n_kv
    layout = layout or layout_for(group)
    if layout == "looped":
        size, width = queries.dtype.size, keys.shape[2]
        staged_rows = _chosen(stage, FORCED_STAGE, looped.STAGE) \
            and looped.can_stage(width, group, dim, size)
        wanted = 0 if staged_rows else _chosen(ring, FORCED_RING, looped.RING)
        ringed = bool(wanted) and looped.can_ring(dim, size)
        split_sums = looped.can_split(group) and _chosen(split, FORCED_SPLIT, looped.SPLIT)
        w = warps or FORCED_WARPS or (looped.stage_warps_for(group, dim) if staged_rows
                                      else looped.warps_for(width, group, dim, ringed,
                                                            split_sums))
        choices = looped.STAGE_WARP_CHOICES if staged_rows else looped.WARP_CHOICES
        if w not in choices:
            raise ValueError(f"looped warps {w}: one of {choices}")
        slots = looped.ring_slots(group, dim, size, w, wanted)
        fetch_ahead = looped.PREFETCH if prefetch is None else prefetch
        template = [("T", queries.dtype), ("D", dim), ("G", group), ("W", w),
                    ("U", looped.unroll(group, dim, w)),
                    ("P", int(fetch_ahead and not staged_rows)), ("R", slots),
                    ("S", int(staged_rows)),
                    ("H", int(split_sums))]
        shared = looped.shared_bytes(group, dim) + (
            16 + looped.stage_bytes(width, dim, size) if staged_rows
            else looped.ring_bytes(dim, size, w, slots))
        return _kernel(layout, shared, w)(
            inputs=[queries, keys, values, scale_array(scale)], template=template,
            grid=(32 * w, n_kv, b), threadgroup=(32 * w, 1, 1),
            output_shapes=[(b, n_q, 1, dim)], output_dtypes=[queries.dtype])[0]
    if layout == "staged":
        unrolled = staged.SLOTS
        shared = staged.shared_bytes(dim, queries.dtype.size)
    else:
        unrolled, shared = unroll(group, dim, queries.dtype.size), 0
    template = [("T", queries.dtype), ("D", dim), ("G", group), ("U", unrolled)]
    return _kernel(layout, shared)(
        inputs=[queries, keys, values, scale_array(scale)], template=template,
        grid=(32 * WARPS, n_kv, b), threadgroup=(32 * WARPS, 1, 1),
        output_shapes=[(b, n_q, 1, dim)], output_dtypes=[queries.dtype])[0]

"""The grouped decode kernel's third layout, ``looped``: MLX's 32 key streams on ``W``
warps (``W`` = 4, 8 or 16; ``WARPS`` by default), each warp running ``32 / W`` streams
one after another, so a block is ``32 W`` threads and several blocks share an SM.

Why: the other layouts run a block of 1024 threads (one warp a stream, MLX's ``BN``) per
(row, KV head). At a decode step's few hundred keys each warp holds 4-8 keys, so the
block's setup, its shared-memory merge and ``__syncthreads`` cost more than the keys,
and a 1024-thread block leaves one block an SM (llama-3.1-8b B=256: ~222 us a layer
where the bytes need ~81 us on the H200).

The arithmetic is MLX's, op for op (``grouped_decode.py`` lists it):

- lanes as in ``simple`` (MLX's): lane ``l`` owns dims ``vpt * l ..`` of the key, every
  query head of the group runs on the whole warp; the scaled query stays in registers;
- stream ``s`` (0..31) is warp ``s % W``'s stream ``t = s / W``; its keys
  ``s, s + 32, ...`` go through exactly MLX's per-key online softmax, in order, from
  MLX's initial state. A warp walks its streams' keys as one sequence (stream after
  stream), loading ``U`` keys ahead across stream ends (where loads sit changes no
  arithmetic); when a stream's last key is done, its ``m``, ``l`` (per query head) and
  ``o`` (per head and dim) go to shared memory at index ``s``, and the state restarts.
  A stream with no keys stores MLX's initial state (``m`` = the lowest finite float,
  ``l = o = 0``), as MLX's idle warp does;
- the merge after one ``__syncthreads``: for each head, one warp with lane = stream runs
  MLX's code as it is (butterfly max of ``m``, ``f = exp2(m - M)`` on each lane, the
  butterfly sum of ``l * f``, ``__frcp_rn``) and stores each stream's ``f`` and lane 0's
  reciprocal; after a second ``__syncthreads`` a thread per (head, dim) forms
  ``o_s * f_s`` for the 32 streams and adds them in the tree lane 0 of MLX's butterfly
  builds (``a[s] += a[s + off]`` for ``s < off``, ``off`` = 16, 8, 4, 2, 1: lane 0's
  partner at each level is lane ``off``, whose own partial sums are formed the same
  way, own value first), times that reciprocal, rounded to the dtype. That is the value
  MLX's lane 0 writes: no reordering, not even a commuted add.

Budget (the reason for this design). Merging stream by stream as they finish would
change the order, so all 32 streams' ``o`` must be kept until the merge: in registers
that is ``G * vpt * 32 / W`` floats a lane (64 at G=4, D=128, W=8: too many), so they go
to shared memory as floats: ``32 * G * D * 4`` bytes, at most 64 KiB (``fits`` caps
``G * vpt`` at 16), plus ``m``, ``l``, ``f`` (``3 * 32 * G`` floats) and ``G``
reciprocals: 65.5 KiB at llama-3.1-8b's G=4, D=128. Three such blocks fit an H200 SM
(228 KiB, 1 KiB reserved a block). Registers: a lane holds the query and ``o`` for
every head (``2 G vpt`` = 32 floats at G * vpt = 16), ``m``, ``l`` (``2 G``) and ``U``
keys and values in flight; ``__launch_bounds__(32 W, 768 / (32 W))`` (W=16: 2) asks
for at most 85 registers at W = 4 and 8 (3 blocks of 256 threads an SM at W=8: 24
warps, against today's one block of 32) and 64 at W = 16 (2 blocks of 512).
``unroll`` picks ``U`` (keys a warp loads ahead): at the 8B shape (G * vpt = 16) W=8
compiles to 80 registers with U=2, no spills; W=16 to 64 with U=1. The block's other
fixed cost is the merge's 32 partial sums a thread (about 70 registers at any state).

Expected at the 8B shape (B=256: 2048 blocks): 3 blocks of 8 warps an SM (shared memory
binds first, registers allow 3 too), 24 warps with 2 keys and values in flight each
(~24 KiB an SM, about what the H200's latency needs at full bandwidth, with no margin);
W=4 gives 3 blocks of 4 warps (shared memory), W=16 2 blocks of 16 with 1 key in flight.
What it saves: a block's fixed cost (query loads, the merge, two ``__syncthreads``) is
paid by 256 threads instead of 1024, a warp runs 4 streams' keys back to back, and the
merge's ``o`` sums are plain loads, multiplies and adds (a thread per head and dim: 2 at
G=4, D=128, W=8) instead of 5-shuffle butterflies for every dim.

The ring (template ``R``, ``ring_slots``; ``R = 0`` is the register path above). The
first timing put the kernel at 0.8-1.4 TB/s: a warp loads ``U`` keys, then computes
them with nothing in flight, and ``U`` is bound by the registers. With ``R`` slots a
warp, K and V rows go through ``cp.async`` into the warp's ring in shared memory
(``W * R * 2 D * size`` bytes a block after the merge's arrays), ``R`` rows ahead of
the key being computed, in the order the warp computes them; a slot is refilled
right after its key is computed. Each lane copies its own ``VPT`` elements of a row
(4, 8 or 16 bytes: ``can_ring``; not head dim 96) and reads back only those, so no lane
waits on another and no ``__syncwarp`` is needed; rows that are not contiguous go
through the lane's registers into its slot. Only where the loads sit changes: every
key meets the same arithmetic in the same order. With a ring ``warps_for`` takes W = 8
at the 8B heads (``G * VPT`` = 16, where W = 16's ring spills 4-8 bytes at 64
registers, ptxas 12.9; its shared memory then leaves two blocks an SM instead of
three), W = 16 elsewhere: the H200's fastest at 4 slots
(reports/bench/cuda-sm90/issue28-ring/). The ring is off by default (``RING``): the
decode step did not get faster with it.

Off by default (``PREFETCH``, template ``P``): after each batch of ``U`` keys a warp
asks the rows of its next two streams into L2 (``prefetch.global.L2``: no registers,
no shared memory, no arithmetic; the register loads then wait on L2, not DRAM), ~4 KiB
a stream at 192 keys; the probe times it against ``P = 0``.

The split sums (template ``H``, ``SPLIT``). Nsight found the kernel bound by instruction
issue, not memory (reports/bench/cuda-sm90/issue28-stage/): per key a lane runs MLX's
butterfly (5 shuffles and 5 adds) and its online softmax update (a max, two subtracts,
two ``exp2``, an ``fma``) once for each of the G heads, every lane alike. With ``H`` the
first ``log2 G`` levels of the G butterflies run as one: at level ``off`` a lane keeps
the half of the heads its bit ``off`` names, sends the other half to its partner and
adds the partner's value of each kept head, own value first as MLX's lane does (at
G = 4: 2 + 1 shuffles and adds instead of 4 + 4). Each lane then holds one head's
partial, ``lane / (32 / G)``, and runs MLX's remaining levels on it: every lane of
that head ends with the bits every lane of MLX's warp has (a level adds the same two
partial sums in both partners, since a float add commutes). The lane runs the
softmax update for that head only (its ``m`` and ``l`` live in ``m[0]``, ``l[0]``), and
the heads' ``f`` and ``e`` go to every lane by shuffle: the same values in the same
operations, G times fewer of the update's instructions. A group that is not a power of
two (or one head) keeps MLX's per-head sums (``can_split``).

Compiled with NVRTC 12.9 for sm_90a at every template combination ``fits`` admits
(tools/h200/looped_compile_check.py); on the H200 its output equals
``mx.fast.scaled_dot_product_attention``'s on every shape of
tools/h200/gqa_exact_probe.py (reports/bench/cuda-sm90/issue28-looped/).
"""

from __future__ import annotations

from batchlab.engine.kernels.decode_streams import MLX_KEY_UPDATE, MLX_QUERY_STATE

# H = 1: the G heads' butterfly sums split over the lanes (module docstring, ``can_split``)
SPLIT_KEY_UPDATE = """            {
                float kf[VPT];
                float sc[G];
                float vf[VPT];
#pragma unroll
                for (int i = 0; i < VPT; ++i) {
                    kf[i] = static_cast<float>(kk[u].v[i]);
                    vf[i] = static_cast<float>(vv[u].v[i]);
                }
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    sc[j] = __fmaf_rn(qv[j][0], kf[0], 0.0f);
#pragma unroll
                    for (int i = 1; i < VPT; ++i) sc[j] = __fmaf_rn(qv[j][i], kf[i], sc[j]);
                }
                // MLX's levels 16, 8, ... while the lane holds several heads: it keeps
                // the half its bit ``off`` names and adds the partner's value of each
                // kept head (the partner keeps the other half and gets ours)
#pragma unroll
                for (int t = 0; t < LG; ++t) {
                    const int off = 16 >> t;
                    const int half = G >> (t + 1);
                    const bool up = (lane & off) != 0;
#pragma unroll
                    for (int i = 0; i < half; ++i) {
                        const float mine = up ? sc[i + half] : sc[i];
                        const float sent = up ? sc[i] : sc[i + half];
                        sc[i] = __fadd_rn(mine, __shfl_xor_sync(0xffffffffu, sent, off));
                    }
                }
                // the rest of MLX's levels on the one head left: head ``own``
#pragma unroll
                for (int off = 16 >> LG; off > 0; off >>= 1) {
                    sc[0] = __fadd_rn(sc[0], __shfl_xor_sync(0xffffffffu, sc[0], off));
                }
                const float mn = fmaxf(m[0], sc[0]);
                const float f = ex2_approx(__fsub_rn(m[0], mn));
                const float e = ex2_approx(__fsub_rn(sc[0], mn));
                m[0] = mn;
                l[0] = __fmaf_rn(f, l[0], e);
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    const float fj = __shfl_sync(0xffffffffu, f, j * SPAN);
                    const float ej = __shfl_sync(0xffffffffu, e, j * SPAN);
#pragma unroll
                    for (int i = 0; i < VPT; ++i) {
                        o[j][i] = __fmaf_rn(fj, o[j][i], __fmul_rn(ej, vf[i]));
                    }
                }
            }
"""
KEY_UPDATE = ("            if (H) {\n" + SPLIT_KEY_UPDATE + "            } else {\n"
              + MLX_KEY_UPDATE + "            }\n")

WARPS = 8  # W: warps a block (4, 8 or 16), 32 / W streams a warp
WARP_CHOICES = (4, 8, 16)
# From this many keys W = 16 (two streams a warp) beat W = 8 at llama-3.1-8b's heads on
# the H200, below it W = 8 did (reports/bench/cuda-sm90/issue28-looped/)
WIDE_KEYS = 160
# R: K and V rows a warp keeps in flight through ``cp.async`` into its shared-memory ring
# (``ring_slots``); 0 loads them into registers, ``U`` at a time. Off by default: on the
# H200 it was bit-exact and faster a call, but the decode step did not follow
# (reports/bench/cuda-sm90/issue28-ring/). BATCHLAB_GQA_RING=4 turns it on
RING = 0
RING_CHOICES = (2, 4, 8)  # what BATCHLAB_GQA_RING may ask for (0: none)
RING_NARROW_STATE = 16  # from here W = 16's ring spills (ptxas 12.9: 64 registers)
BLOCK_SHARED = 232448  # the shared memory one block may take on the H200 (227 KiB)
ASYNC_BYTES = (4, 8, 16)  # the sizes of a cp.async copy
# S: the block asks every K and V row into shared memory before computing (16-byte
# cp.async.cg copies from all its threads, one commit group per phase of W streams),
# so a block's rows are in flight at once rather than U or R keys a warp. Off: on the
# H200 it was bit-exact but slower a call at llama-3.1-8b's heads (206-227 us against
# 157-170 at B=256, 192 keys: its rows and the merge's arrays leave one block an SM),
# faster only at llama-3.2-1b's (reports/bench/cuda-sm90/issue28-stage/).
# BATCHLAB_GQA_STAGE=1 turns it on
STAGE = False
STAGE_BUCKETS = (32, 64, 128, 256)  # staged rows a block is sized for (one kernel each)
STAGE_WARP_CHOICES = (4, 8, 16, 32)  # W = 32: a warp a stream, one phase (MLX's layout)
STAGE_WARPS = 16  # W of a staging call (stage_warps_for)
# H: the G heads' butterfly sums of a key split over the lanes, so that each lane ends
# on one head's score and runs the online softmax update for that head alone (the
# module's docstring); where ``can_split``. On: on the H200 its bits were MLX's on every
# shape of gqa_exact_probe.py split, and llama-3.1-8b B=256's step took 0.957x the time
# with MLX's sums, paired in one process (reports/bench/cuda-sm90/issue28-split/).
# BATCHLAB_GQA_SPLIT=0 turns it off
SPLIT = True
# P: each warp asks its next streams' rows into L2 ahead (``prefetch.global.L2``, no
# registers, no arithmetic); off until the H200 times it (gqa_exact_probe.py looped)
PREFETCH = False


def bounds(warps: int) -> str:  # not gated: gpu only
    """The header line giving the kernel its launch bounds: ``32 W`` threads, and blocks
    an SM enough for 768 threads (85 registers a thread) or, at W=16, two (64)."""
    return ("#undef __global__\n#define __global__ __location__(global) "
            f"__launch_bounds__({32 * warps}, {min_blocks(warps)})\n")


def warps_for(keys: int, group: int, dim: int, ringed: bool,  # not gated: gpu only
              split: bool = False) -> int:
    """W for a call. With a ring: 8 where a lane holds ``RING_NARROW_STATE`` query and
    output floats or more (the 8B heads: W = 16's ring spills there), else 16. Without
    one: 16 from ``WIDE_KEYS`` keys, where it compiles without spills (not at D=64, G=8:
    ``unroll``), else ``WARPS``."""
    if ringed:
        return 8 if group * (dim // 32) >= RING_NARROW_STATE else 16
    if split:
        return 16
    if keys >= WIDE_KEYS and not (dim == 64 and group == 8):
        return 16
    return WARPS


def stage_warps_for(group: int, dim: int) -> int:  # not gated: gpu only
    """W for a staging call: ``STAGE_WARPS``, but 8 at head dim 64 with a group of 8,
    where W = 16 and 32 spill at 64 registers (ptxas 13.0)."""
    return 8 if dim == 64 and group == 8 else STAGE_WARPS


def min_blocks(warps: int) -> int:  # not gated: gpu only
    """Blocks an SM the launch bounds ask registers for (see the module's budget); one
    at W = 32 (staging only: 1024 threads, 64 registers each)."""
    return 1 if warps == 32 else max(2, 768 // (32 * warps))


def shared_bytes(group: int, dim: int) -> int:  # not gated: gpu only
    """Dynamic shared memory of a block: ``o`` of 32 streams x G heads x D dims, ``m``,
    ``l`` and ``f`` of 32 streams x G heads, and G reciprocals, all floats."""
    floats = 32 * group * dim + 3 * 32 * group + group
    return (4 * floats + 15) // 16 * 16


def ring_bytes(dim: int, itemsize: int, warps: int, slots: int) -> int:  # not gated: gpu only
    """The rings' shared memory: ``slots`` K and V rows for each of the block's warps."""
    return warps * slots * 2 * dim * itemsize


def stage_rows(keys: int) -> int:  # not gated: gpu only
    """The rows a staging block is sized for: the smallest ``STAGE_BUCKETS`` entry that
    holds ``keys`` (the size is fixed per kernel: MLX sets a kernel's shared-memory
    limit once, when it first loads it)."""
    return next(rows for rows in STAGE_BUCKETS if rows >= keys)


def stage_bytes(keys: int, dim: int, itemsize: int) -> int:  # not gated: gpu only
    """The staging area's shared memory: ``stage_rows(keys)`` K rows, then as many V."""
    return 2 * stage_rows(keys) * dim * itemsize


def can_stage(keys: int, group: int, dim: int, itemsize: int) -> bool:  # not gated: gpu only
    """Whether the merge's arrays and every row fit one block's shared memory."""
    if keys > STAGE_BUCKETS[-1]:
        return False
    return shared_bytes(group, dim) + 16 + stage_bytes(keys, dim, itemsize) <= BLOCK_SHARED


def can_split(group: int) -> bool:  # not gated: gpu only
    """Whether the heads' sums can split over the lanes: a group of 2 to 16 heads, a power
    of two (each level of MLX's butterfly halves the heads a lane holds)."""
    return 2 <= group <= 16 and group & (group - 1) == 0


def can_ring(dim: int, itemsize: int) -> bool:  # not gated: gpu only
    """Whether a lane's share of a row is a ``cp.async`` size (not at head dim 96: 6 or
    12 bytes)."""
    return dim // 32 * itemsize in ASYNC_BYTES


def ring_slots(group: int, dim: int, itemsize: int, warps: int,  # not gated: gpu only
               wanted: int = 0) -> int:
    """R: the ``wanted`` slots where ``can_ring`` and the block's shared memory stays
    within one block's limit, else 0."""
    if not wanted or not can_ring(dim, itemsize):
        return 0
    need = shared_bytes(group, dim) + ring_bytes(dim, itemsize, warps, wanted)
    return wanted if need <= BLOCK_SHARED else 0


def unroll(group: int, dim: int, warps: int) -> int:  # not gated: gpu only
    """Keys a warp loads ahead (``U``): the most that compile without spills in the
    registers the launch bounds leave (80 at W = 4 and 8, 64 at W = 16), ptxas 12.9,
    sm_90a, every dtype, head dim and group ``fits`` admits
    (tools/h200/looped_compile_check.py; one exception: D=64, G=8 at W=16 spills 8
    bytes even at U=1)."""
    state = group * (dim // 32)  # query and output floats a lane holds per stream
    if warps >= 16:
        return 4 if state <= 6 else 2 if state <= 10 else 1
    return 4 if state <= 10 else 2


SOURCE = """
    constexpr int VPT = D / 32;
    constexpr int NS = 32 / W;        // streams a warp
    // H = 1: log2 G, and the lanes a head's score ends on (lane / SPAN is the lane's head)
    constexpr int LG = H ? (G >= 16 ? 4 : G >= 8 ? 3 : G >= 4 ? 2 : G >= 2 ? 1 : 0) : 0;
    constexpr int SPAN = 32 >> LG;
    constexpr int VB = VPT * sizeof(T);
    constexpr int VA = (VB & -VB) > 16 ? 16 : (VB & -VB);  // VPT = 3: 6 or 12 bytes
    struct alignas(VA) Vec { T v[VPT]; };
    constexpr int OB = VPT * 4;
    constexpr int OA = (OB & -OB) > 16 ? 16 : (OB & -OB);  // VPT = 3: 4 bytes
    struct alignas(OA) OVec { float v[VPT]; };
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int n_q_heads = q_shape[1];
    const int keys = k_shape[2];
    const float scale_log2 = static_cast<float>(static_cast<double>(scale[0]) * 1.4426950408889634);
    const bool vec = k_strides[3] == 1 && v_strides[3] == 1
        && (k_strides[2] % VPT) == 0 && (v_strides[2] % VPT) == 0
        && (k_strides[1] % VPT) == 0 && (v_strides[1] % VPT) == 0
        && (k_strides[0] % VPT) == 0 && (v_strides[0] % VPT) == 0;

    // shared: o[G][32 streams][D], then f, m, l [G][32], then G reciprocals
    extern __shared__ __align__(16) float looped_raw[];
    float* sm_o = looped_raw;
    float* sm_f = sm_o + G * 32 * D;
    float* sm_m = sm_f + G * 32;
    float* sm_l = sm_m + G * 32;
    float* sm_tot = sm_l + G * 32;
    // R > 0: the warps' rings after them (16-byte aligned), R slots of a K row then a V row
    T* ring = reinterpret_cast<T*>(looped_raw + (G * 32 * D + 3 * 32 * G + G + 3) / 4 * 4)
        + warp * R * 2 * D;

""" + MLX_QUERY_STATE + """\
    // a finished stream's state to shared memory, and MLX's initial state back
    // (H = 1: a lane holds m and l of its own head only, in m[0] and l[0])
    auto flush = [&](int s) {
#pragma unroll
        for (int j = 0; j < G; ++j) {
            if (H ? (j == 0 && lane % SPAN == 0) : lane == 0) {
                const int head = H ? lane / SPAN : j;
                sm_m[head * 32 + s] = m[j];
                sm_l[head * 32 + s] = l[j];
            }
            OVec ov;
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                ov.v[i] = o[j][i];
                o[j][i] = 0.0f;
            }
            *reinterpret_cast<OVec*>(sm_o + (j * 32 + s) * D + VPT * lane) = ov;
            m[j] = -3.40282347e+38f;
            l[j] = 0.0f;
        }
    };
    // this warp's streams s = warp, warp + W, ... (keys s, s + 32, ...) as one sequence
    // of rows, stream after stream; the streams with keys come first. The row after r:
    // the stream's next key, else the next stream's first, else none (-1)
    const int last_stream = min(32, keys);  // streams from here have no keys
    auto next = [&](int r) {
        if (r + 32 < keys) return r + 32;
        const int s = (r & 31) + W;
        return s < last_stream ? s : -1;
    };
    const int ks = static_cast<int>(k_strides[2]);  // a row: far below 2^31 elements
    const int vs = static_cast<int>(v_strides[2]);
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    // the register path's rows, where they are contiguous (vec) and every element this
    // block reads lies in [0, 2^31) elements of the buffer's start (a first row at or
    // past the start, rows in order): a row's address is the lane's 32-bit offset (kl,
    // vl) plus r times the row stride. With kb + r * ks, the compiler rebuilt the 64-bit
    // bases from the strides at every key (SASS)
    const long long k_base = b * k_strides[0] + g * k_strides[1];
    const long long v_base = b * v_strides[0] + g * v_strides[1];
    const bool vec32 = vec && k_base >= 0 && v_base >= 0 && ks >= 0 && vs >= 0
        && k_base + static_cast<long long>(keys - 1) * ks + D < 2147483647LL
        && v_base + static_cast<long long>(keys - 1) * vs + D < 2147483647LL;
    const int kl = vec32 ? static_cast<int>(k_base) + VPT * lane : 0;
    const int vl = vec32 ? static_cast<int>(v_base) + VPT * lane : 0;
    // P = 1: the rows of K and V of the next two streams after the one computing asked
    // into L2 (prefetch.global.L2: no registers held, no arithmetic changed), after
    // each batch of U keys; rows only below keys, only where rows are contiguous (vec)
    auto prefetch = [&](int s) {
        constexpr int LINES = (D * static_cast<int>(sizeof(T)) + 127) / 128;  // a row
        const int n = (keys - 1 - s) / 32 + 1;
        for (int e = lane; e < 2 * n * LINES; e += 32) {
            const bool val = e >= n * LINES;
            const int rest = val ? e - n * LINES : e;
            const int key = rest / LINES;
            const int row = s + 32 * key;
            const T* p = (val ? vb + row * vs : kb + row * ks)
                + (rest - key * LINES) * (128 / static_cast<int>(sizeof(T)));
            asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
        }
    };
    if (S) {
        // S = 1: the block first asks every K and V row it will read into shared
        // memory (16-byte cp.async.cg copies, all threads, one commit group per phase
        // t = the streams t W .. t W + W - 1), then phase by phase each warp computes
        // its stream t W + warp from there. Only where the loads sit changes
        constexpr int CH = D * static_cast<int>(sizeof(T)) / 16;  // 16-byte pieces a row
        constexpr int EL = 16 / static_cast<int>(sizeof(T));
        T* stage_k = reinterpret_cast<T*>(looped_raw + (G * 32 * D + 3 * 32 * G + G + 3) / 4 * 4);
        T* stage_v = stage_k + ((keys + 31) & ~31) * D;
        const bool al16 = vec && (reinterpret_cast<unsigned long long>(kb) & 15) == 0
            && (reinterpret_cast<unsigned long long>(vb) & 15) == 0
            && (ks * static_cast<int>(sizeof(T))) % 16 == 0
            && (vs * static_cast<int>(sizeof(T))) % 16 == 0;
        const int rounds = (keys + 31) / 32;  // keys a stream, at most
#pragma unroll
        for (int t = 0; t < NS; ++t) {
            for (int idx = threadIdx.x; idx < rounds * W * 2 * CH; idx += 32 * W) {
                const int c = idx % CH;
                const int rest = idx / CH;
                const bool val = rest & 1;
                const int r = 32 * (rest / (2 * W)) + t * W + (rest >> 1) % W;
                if (r >= keys) continue;
                T* dst = (val ? stage_v : stage_k) + r * D + c * EL;
                if (al16) {
                    const T* src = (val ? vb + r * vs : kb + r * ks) + c * EL;
                    const unsigned int sd =
                        static_cast<unsigned int>(__cvta_generic_to_shared(dst));
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                                 :: "r"(sd), "l"(src) : "memory");
                } else {
                    const long long st = val ? v_strides[3] : k_strides[3];
                    const T* row = val ? vb + r * vs : kb + r * ks;
                    for (int e = 0; e < EL; ++e) dst[e] = row[(c * EL + e) * st];
                }
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
#pragma unroll
        for (int t = 0; t < NS; ++t) {
            // phase t's rows are in: NS - 1 - t groups may still be in flight
            if (NS - 1 - t >= 3) asm volatile("cp.async.wait_group 3;" ::: "memory");
            else if (NS - 1 - t == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");
            else if (NS - 1 - t == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");
            else asm volatile("cp.async.wait_group 0;" ::: "memory");
            __syncthreads();
            const int s = t * W + warp;
            for (int r0 = s; r0 < keys; r0 += 32 * U) {
                Vec kk[U];
                Vec vv[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int r = min(r0 + 32 * u, keys - 1);  // past the end: unused
                    kk[u] = *reinterpret_cast<const Vec*>(stage_k + r * D + VPT * lane);
                    vv[u] = *reinterpret_cast<const Vec*>(stage_v + r * D + VPT * lane);
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (r0 + 32 * u >= keys) break;  // uniform over the warp
""" + KEY_UPDATE + """\
                }
            }
            flush(s);  // a stream without keys stores MLX's initial state
        }
    }
    int pf = warp;  // the next stream to prefetch
    auto ahead = [&](int cur) {
        if (P == 0 || !vec) return;
        for (; pf <= cur + 2 * W && pf < last_stream; pf += W) prefetch(pf);
    };
    ahead(warp);
    int lr = !S && warp < last_stream ? warp : -1;  // the next row to load
    int cr = lr;                              // the next row to compute
    if (R > 0) {
        // the ring: each lane copies its own VPT elements of a row's K and V (VB bytes,
        // a cp.async size: ring_slots) and reads back only those, so no lane waits on
        // another; a slot is refilled only after the key it held is computed. Rows that
        // are not contiguous (not vec) go through the lane's registers into its slot
        auto fill = [&](int slot) {
            if (lr >= 0) {
                T* dst = ring + slot * 2 * D + VPT * lane;
                if (vec) {
                    const unsigned int sk =
                        static_cast<unsigned int>(__cvta_generic_to_shared(dst));
                    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                                 :: "r"(sk), "l"(kb + lr * ks + VPT * lane), "n"(VB)
                                 : "memory");
                    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                                 :: "r"(sk + D * static_cast<int>(sizeof(T))),
                                    "l"(vb + lr * vs + VPT * lane), "n"(VB) : "memory");
                } else {
                    for (int i = 0; i < VPT; ++i) {
                        dst[i] = kb[lr * ks + (VPT * lane + i) * k_strides[3]];
                        dst[D + i] = vb[lr * vs + (VPT * lane + i) * v_strides[3]];
                    }
                }
                lr = next(lr);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");  // one group a slot
        };
#pragma unroll
        for (int slot = 0; slot < R; ++slot) fill(slot);
        int slot = 0;
        while (cr >= 0) {
            asm volatile("cp.async.wait_group %0;" :: "n"(R > 0 ? R - 1 : 0) : "memory");
            Vec kk[1];
            Vec vv[1];
            kk[0] = *reinterpret_cast<const Vec*>(ring + slot * 2 * D + VPT * lane);
            vv[0] = *reinterpret_cast<const Vec*>(ring + slot * 2 * D + D + VPT * lane);
            constexpr int u = 0;
""" + KEY_UPDATE + """\
            const int stream = cr & 31;
            cr = next(cr);
            if (cr < 0 || (cr & 31) != stream) flush(stream);  // its last key: store it
            fill(slot);
            slot = slot + 1 == R ? 0 : slot + 1;
            if (cr >= 0) ahead(cr & 31);
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    while (R == 0 && cr >= 0) {
        // the loads of U rows first (past the end: the last key, unused); lr and cr walk
        // the same rows, so the row after each is found once, here (after[u])
        Vec kk[U];
        Vec vv[U];
        int after[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int r = lr >= 0 ? lr : keys - 1;
            if (lr >= 0) lr = next(lr);
            after[u] = lr;
            if (vec32) {
                kk[u] = *reinterpret_cast<const Vec*>(k + (kl + r * ks));
                vv[u] = *reinterpret_cast<const Vec*>(v + (vl + r * vs));
            } else {
                for (int i = 0; i < VPT; ++i) {
                    kk[u].v[i] = kb[r * ks + (VPT * lane + i) * k_strides[3]];
                    vv[u].v[i] = vb[r * vs + (VPT * lane + i) * v_strides[3]];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (cr < 0) break;  // uniform over the warp
""" + KEY_UPDATE + """\
            const int stream = cr & 31;
            cr = after[u];
            if (cr < 0 || (cr & 31) != stream) flush(stream);  // its last key: store it
        }
        if (cr >= 0) ahead(cr & 31);
    }
    for (int s = warp; s < 32; s += W) {  // streams without keys: MLX's initial state
        if (!S && s >= last_stream) flush(s);
    }
    __syncthreads();

    // MLX's merge of m and l, a warp a head, lane = stream; each stream's f kept
    for (int j = warp; j < G; j += W) {
        const float mine = sm_m[j * 32 + lane];
        const float big = warp_max(mine);
        const float f = ex2_approx(__fsub_rn(mine, big));
        float total = warp_sum(__fmul_rn(sm_l[j * 32 + lane], f));
        total = total == 0.0f ? 0.0f : __frcp_rn(total);
        sm_f[j * 32 + lane] = f;
        if (lane == 0) sm_tot[j] = total;
    }
    __syncthreads();
    // o: a thread per (head, dim), lane 0's butterfly tree over the 32 streams
    for (int item = threadIdx.x; item < G * D; item += 32 * W) {
        const int j = item / D;
        const int d = item - j * D;
        const float* os = sm_o + j * 32 * D + d;
        const float4* fs = reinterpret_cast<const float4*>(sm_f + j * 32);
        float a[32];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const float4 f4 = fs[c];
            a[4 * c + 0] = __fmul_rn(os[(4 * c + 0) * D], f4.x);
            a[4 * c + 1] = __fmul_rn(os[(4 * c + 1) * D], f4.y);
            a[4 * c + 2] = __fmul_rn(os[(4 * c + 2) * D], f4.z);
            a[4 * c + 3] = __fmul_rn(os[(4 * c + 3) * D], f4.w);
        }
        // off = 16, 8, 4, 2, 1: a[s] += a[s + off] for s < off (each level spelled out,
        // so that a[] stays in registers)
#pragma unroll
        for (int s = 0; s < 16; ++s) a[s] = __fadd_rn(a[s], a[s + 16]);
#pragma unroll
        for (int s = 0; s < 8; ++s) a[s] = __fadd_rn(a[s], a[s + 8]);
#pragma unroll
        for (int s = 0; s < 4; ++s) a[s] = __fadd_rn(a[s], a[s + 4]);
        a[0] = __fadd_rn(a[0], a[2]);
        a[1] = __fadd_rn(a[1], a[3]);
        a[0] = __fadd_rn(a[0], a[1]);
        out[(b * n_q_heads + g * G + j) * D + d] = static_cast<T>(__fmul_rn(a[0], sm_tot[j]));
    }
"""

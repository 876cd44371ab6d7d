"""The grouped decode kernel's second layout: the same float operations as MLX's one-pass
kernel (``grouped_decode.py`` lists them), fewer instructions and the loads in flight.

In MLX's layout a warp holds one key (lane ``l`` owns dims ``vpt * l ..``) and every
query head of the group runs its own five-shuffle score sum and softmax update on all
32 lanes. Here the warp's lanes are split into ``G`` groups of ``L = 32 / G``, one per
query head, all on the same key: lane ``p`` of a group does the work of MLX's lanes
``p, p + L, p + 2L, ...`` (``G`` of them). The butterfly sum pairs MLX's lanes ``l`` and
``l ^ 16`` first, then ``^ 8``, ...: the pairs across lanes ``L`` apart are this lane's
own, added in registers in that order, and the rest are shuffles inside the group, so
each head's score is MLX's, from one shuffle chain for all heads (``log2 L`` shuffles a
key instead of ``5 G``). Each head's softmax update then runs once a key on its group's
lanes, over the dims they own.

Keys and values reach shared memory through ``cp.async`` (``U`` keys in flight a warp,
no registers held for them); each lane reads the dims it owns from there. Where the
rows are not 16-byte aligned the copies are plain loads and stores (same values).
"""

from __future__ import annotations

SLOTS = 4  # keys in flight a warp

SOURCE = """
    constexpr int VPT = D / 32;       // dims of one MLX lane
    constexpr int L = 32 / G;         // lanes per query head
    constexpr int A = G;              // MLX lanes a lane stands for
    constexpr int ROW = 2 * D;        // a slot: the key's D elements, then the value's
    constexpr int CHUNKS = ROW * sizeof(T) / 16;
    constexpr int VB = VPT * sizeof(T);
    constexpr int VA = (VB & -VB) > 16 ? 16 : (VB & -VB);  // VPT = 3: 6 or 12 bytes
    struct alignas(VA) Vec { T v[VPT]; };
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int h = lane / L;           // the query head of the group this lane serves
    const int p = lane % L;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int n_q_heads = q_shape[1];
    const int keys = k_shape[2];
    const float scale_log2 = static_cast<float>(static_cast<double>(scale[0]) * 1.4426950408889634);
    const T* kb = k + b * k_strides[0] + g * k_strides[1];
    const T* vb = v + b * v_strides[0] + g * v_strides[1];
    const bool async_ok = k_strides[3] == 1 && v_strides[3] == 1
        && (k_strides[2] * sizeof(T)) % 16 == 0 && (v_strides[2] * sizeof(T)) % 16 == 0
        && (reinterpret_cast<size_t>(kb) & 15) == 0 && (reinterpret_cast<size_t>(vb) & 15) == 0;
    extern __shared__ __align__(16) unsigned char stage_raw[];
    T* slots = reinterpret_cast<T*>(stage_raw) + warp * (U * ROW);

    float qv[A][VPT];
    float o[A][VPT];
    {
        const T* qp = q + b * q_strides[0] + (g * G + h) * q_strides[1];
#pragma unroll
        for (int a = 0; a < A; ++a) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const float x = static_cast<float>(qp[(VPT * (p + L * a) + i) * q_strides[3]]);
                qv[a][i] = __fmul_rn(scale_log2, x);
                o[a][i] = 0.0f;
            }
        }
    }
    float m = -3.40282347e+38f;  // Limits<float>::finite_min()
    float l = 0.0f;

    // key r of this warp's stream into slot s: 16-byte asynchronous copies, K then V
    auto fetch = [&](int r, int s) {
        T* dst = slots + s * ROW;
        if (async_ok) {
            for (int c = lane; c < CHUNKS; c += 32) {
                const int e = c * 16 / sizeof(T);
                const T* src = e < D ? kb + r * k_strides[2] + e : vb + r * v_strides[2] + (e - D);
                const unsigned int sa =
                    static_cast<unsigned int>(__cvta_generic_to_shared(dst + e));
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(src));
            }
        } else {
            for (int e = lane; e < ROW; e += 32) {
                dst[e] = e < D ? kb[r * k_strides[2] + e * k_strides[3]]
                               : vb[r * v_strides[2] + (e - D) * v_strides[3]];
            }
        }
    };
#pragma unroll
    for (int s = 0; s < U; ++s) {
        const int r = warp + 32 * s;
        if (r < keys) fetch(r, s);
        asm volatile("cp.async.commit_group;");  // one group a slot, empty or not
    }
    for (int t = 0; warp + 32 * t < keys; ++t) {
        asm volatile("cp.async.wait_group %0;" :: "n"(U - 1));
        __syncwarp();
        const T* ks = slots + (t % U) * ROW;
        const T* vs = ks + D;
        float part[A];
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const Vec kx = *reinterpret_cast<const Vec*>(ks + VPT * (p + L * a));
            float s = __fmaf_rn(qv[a][0], static_cast<float>(kx.v[0]), 0.0f);
#pragma unroll
            for (int i = 1; i < VPT; ++i) s = __fmaf_rn(qv[a][i], static_cast<float>(kx.v[i]), s);
            part[a] = s;
        }
        // MLX's butterfly: xor 16, 8, ... between MLX lanes; those L apart or more are
        // this lane's own (a differs), the rest its group's lanes
#pragma unroll
        for (int bit = A / 2; bit > 0; bit >>= 1) {
#pragma unroll
            for (int a = 0; a < A; ++a) {
                if (!(a & bit)) part[a] = __fadd_rn(part[a], part[a | bit]);
            }
        }
        float s = part[0];
#pragma unroll
        for (int off = L / 2; off > 0; off >>= 1) {
            s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
        }
        const float mn = fmaxf(m, s);
        const float f = ex2_approx(__fsub_rn(m, mn));
        const float e = ex2_approx(__fsub_rn(s, mn));
        m = mn;
        l = __fmaf_rn(f, l, e);
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const Vec vx = *reinterpret_cast<const Vec*>(vs + VPT * (p + L * a));
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                o[a][i] = __fmaf_rn(f, o[a][i], __fmul_rn(e, static_cast<float>(vx.v[i])));
            }
        }
        __syncwarp();  // every lane has read the slot before it is refilled
        const int next = warp + 32 * (t + U);
        if (next < keys) fetch(next, t % U);
        asm volatile("cp.async.commit_group;");
    }
    asm volatile("cp.async.wait_group 0;");

    __shared__ float sm_m[G][32];
    __shared__ float sm_l[G][32];
    __shared__ float sm_o[VPT][32][33];
    if (p == 0) {
        sm_m[h][warp] = m;
        sm_l[h][warp] = l;
    }
    __syncthreads();
#pragma unroll 1
    for (int j = 0; j < G; ++j) {
        const float mine = sm_m[j][lane];
        const float big = warp_max(mine);
        const float fj = ex2_approx(__fsub_rn(mine, big));
        float total = warp_sum(__fmul_rn(sm_l[j][lane], fj));
        total = total == 0.0f ? 0.0f : __frcp_rn(total);
        if (h == j) {
#pragma unroll
            for (int a = 0; a < A; ++a) {
#pragma unroll
                for (int i = 0; i < VPT; ++i) sm_o[i][p + L * a][warp] = o[a][i];
            }
        }
        __syncthreads();
        float res[VPT];
        for (int i = 0; i < VPT; ++i) {
            res[i] = __fmul_rn(warp_sum(__fmul_rn(sm_o[i][warp][lane], fj)), total);
        }
        if (lane == 0) {
            T* op = out + (b * n_q_heads + g * G + j) * D + VPT * warp;
            for (int i = 0; i < VPT; ++i) op[i] = static_cast<T>(res[i]);
        }
        __syncthreads();
    }
"""


def shared_bytes(dim: int, itemsize: int) -> int:  # not gated: gpu only
    """The dynamic shared memory of a block: 32 warps x ``SLOTS`` keys and values."""
    return 32 * SLOTS * 2 * dim * itemsize

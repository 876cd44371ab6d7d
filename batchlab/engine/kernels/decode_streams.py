"""What the decode-attention kernels that split a block's keys over streams share
(``quantized_decode.py``; ``grouped_decode.py`` takes only ``scale_array``, since it
merges its streams MLX's way): a block per (row, KV head, chunk of keys), each stream
keeping an online softmax per query head of the group.

- ``merge_streams``: the CUDA text that merges the block's streams in shared memory,
  leaving, per (query head ``j`` of the group, dim ``d``), the chunk's max ``big``, sum
  ``total`` and unnormalised output ``o``, and the query head ``h``;
- ``WRITE_PARTIAL``: the text that writes them as the chunk's partial, which
  ``quantized_decode.combine_chunks`` combines in chunk order;
- the launch inputs both pass: the scale as a float32 array, a one-element mask when
  there is none;
- ``MLX_QUERY_STATE``: the text that opens a stream the way MLX's one-pass kernel does
  (the query times ``scale * log2(e)`` in the lanes' dims, the running ``m``, ``l``,
  ``o`` of every query head of the group), which both layouts of ``grouped_decode.py``
  that keep MLX's lanes (``simple`` and ``looped``) start from, and
  ``MLX_KEY_UPDATE``: their step for key ``u`` of the loaded ``kk`` / ``vv`` (the score
  ``fma`` chain over the lane's dims, the warp's butterfly sum, the online softmax
  update of ``m``, ``l``, ``o``), in MLX's order.
"""

from __future__ import annotations

import functools

import mlx.core as mx

MLX_QUERY_STATE = """    float qv[G][VPT];
    float o[G][VPT];
    float m[G];
    float l[G];
#pragma unroll
    for (int j = 0; j < G; ++j) {
        const T* qp = q + b * q_strides[0] + (g * G + j) * q_strides[1];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const float x = static_cast<float>(qp[(VPT * lane + i) * q_strides[3]]);
            qv[j][i] = __fmul_rn(scale_log2, x);
            o[j][i] = 0.0f;
        }
        m[j] = -3.40282347e+38f;  // Limits<float>::finite_min()
        l[j] = 0.0f;
    }
"""
MLX_KEY_UPDATE = """#pragma unroll
            for (int j = 0; j < G; ++j) {
                float s = __fmaf_rn(qv[j][0], static_cast<float>(kk[u].v[0]), 0.0f);
#pragma unroll
                for (int i = 1; i < VPT; ++i) {
                    s = __fmaf_rn(qv[j][i], static_cast<float>(kk[u].v[i]), s);
                }
                s = warp_sum(s);
                const float mn = fmaxf(m[j], s);
                const float f = ex2_approx(__fsub_rn(m[j], mn));
                const float e = ex2_approx(__fsub_rn(s, mn));
                m[j] = mn;
                l[j] = __fmaf_rn(f, l[j], e);
#pragma unroll
                for (int i = 0; i < VPT; ++i) {
                    o[j][i] = __fmaf_rn(f, o[j][i], __fmul_rn(e, static_cast<float>(vv[u].v[i])));
                }
            }
"""

NEG_INF_HEADER = "#define NEG_INF (-__int_as_float(0x7f800000))\n"

# PER_LANE: the kernel's constant for the dims one lane owns (VPW, VPL)
_MERGE = """    __shared__ float sm_m[NST][G];
    __shared__ float sm_l[NST][G];
    __shared__ float sm_acc[NST][G][D];
    for (int j = 0; j < G; ++j) {
        if (wl == 0) {
            sm_m[st][j] = m[j];
            sm_l[st][j] = l[j];
        }
        for (int i = 0; i < PER_LANE; ++i) sm_acc[st][j][wl * PER_LANE + i] = acc[j][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int j = idx / D;
        const int d = idx % D;
        float big = NEG_INF;
        for (int t = 0; t < NST; ++t) big = fmaxf(big, sm_m[t][j]);
        float total = 0.0f;
        float o = 0.0f;
        if (big != NEG_INF) {
            for (int t = 0; t < NST; ++t) {
                const float f = expf(sm_m[t][j] - big);
                total += sm_l[t][j] * f;
                o += sm_acc[t][j][d] * f;
            }
        }
        const int h = g * G + j;
"""

WRITE_PARTIAL = """        const int row = (b * n_q_heads + h) * n_chunks + c;
        part_acc[row * D + d] = o;
        if (d == 0) {
            part_m[row] = big;
            part_l[row] = total;
        }
    }
"""


def merge_streams(per_lane: str) -> str:
    """The merge, for a kernel whose lanes each own ``per_lane`` dims."""
    return _MERGE.replace("PER_LANE", per_lane)


@functools.cache
def scale_array(scale: float) -> mx.array:  # not gated: gpu only
    """A float32 array of one value, evaluated: a kernel's float argument (the attention's
    scale, a norm's eps) as an input, so a new value compiles nothing."""
    arr = mx.array([scale], dtype=mx.float32)
    mx.eval(arr)
    return arr


@functools.cache
def no_mask() -> mx.array:  # not gated: gpu only
    arr = mx.ones((1, 1, 1, 1), dtype=mx.bool_)
    mx.eval(arr)
    return arr

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
  there is none.
"""

from __future__ import annotations

import functools

import mlx.core as mx

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
    arr = mx.array([scale], dtype=mx.float32)
    mx.eval(arr)
    return arr


@functools.cache
def no_mask() -> mx.array:  # not gated: gpu only
    arr = mx.ones((1, 1, 1, 1), dtype=mx.bool_)
    mx.eval(arr)
    return arr

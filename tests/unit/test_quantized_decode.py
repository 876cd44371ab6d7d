"""What the CUDA packed-cache decode kernel (engine/kernels/quantized_decode.py) is
handed and when it runs, exact values on the CPU. The kernel itself is CUDA-only: its
gate is tools/h200/qkv_decode_probe.py on the H200 (against float32, `QKV OK yes`)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from batchlab.engine.kernels import quantized_decode as qd
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV, KVQuant, unpack

Q4 = KVQuant(bits=4, group_size=64)


def test_the_cache_keeps_the_packed_words_of_exactly_what_it_served():
    rng = np.random.default_rng(0)
    cache = BatchQuantizedKV([2, 0], Q4)
    k = mx.array(rng.standard_normal((2, 2, 5, 64)).astype(np.float32)).astype(mx.bfloat16)
    cache.update_and_fetch(k, k)  # the first forward: the model dtype
    assert cache.served_packed is None
    one = k[:, :, :1]
    keys, values = cache.update_and_fetch(one, one)
    ints, k_packed, v_packed, dk, dv = cache.served_packed
    assert ints is keys[0] and (dk, dv) == (64, 64)
    assert k_packed.dtype == mx.uint32 and k_packed.shape == (2, 2, 6, 9)
    # the kernel reads scales and biases past the ints of each key: the same bits
    for served, packed in ((keys, k_packed), (values, v_packed)):
        for a, b in zip(served, unpack(packed, Q4, 64, mx.bfloat16), strict=True):
            assert mx.array_equal(a, b).item()


def test_which_calls_the_kernel_takes():
    q = mx.zeros((4, 32, 1, 64), mx.bfloat16)
    packed = mx.zeros((4, 8, 300, 9), mx.uint32)
    mask = mx.ones((4, 1, 1, 300), mx.bool_)
    assert qd.fits(q, packed, 64, 64, 4, 64, None)
    assert qd.fits(q, packed, 64, 64, 4, 64, mask)
    assert qd.fits(q, packed, 64, 64, 4, 64, mask[:1])  # one mask for every row
    assert not qd.fits(q, packed, 64, 64, 4, 64, mask[..., :299])  # not the served keys
    assert not qd.fits(q, packed, 64, 64, 4, 64, mask.astype(mx.bfloat16))  # additive
    assert not qd.fits(mx.zeros((4, 32, 2, 64), mx.bfloat16), packed, 64, 64, 4, 64, None)
    assert not qd.fits(q, packed, 64, 32, 4, 64, None)  # value dim != key dim
    assert qd.fits(mx.zeros((4, 32, 1, 128), mx.bfloat16), packed, 128, 128, 8, 64, None)
    assert not qd.fits(mx.zeros((4, 32, 1, 256), mx.bfloat16), packed, 256, 256, 8, 64, None)
    assert not qd.fits(mx.zeros((4, 128, 1, 64), mx.bfloat16), packed, 64, 64, 4, 64, None)


def test_keys_split_into_chunks_of_at_least_64_for_enough_blocks():
    assert qd.num_chunks(64, 8, 4096) == 4  # 2048 blocks
    assert qd.num_chunks(1, 8, 300) == 5  # capped by 64-key chunks
    assert qd.num_chunks(256, 8, 512) == 1
    assert qd.num_chunks(32, 8, 2048) == 8

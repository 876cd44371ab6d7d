"""The quantized batch caches (engine/quantized_kv.py, quantized_ring.py), exact values.

Rows of a quantized batch against mlx-lm's own single-row ``QuantizedKVCache`` fed the
same keys; the packed layout's sizes; the switch at the start offset; filter / extend /
merge / extract; the ring's wrap.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV, KVQuant, pack, unpack
from batchlab.engine.paths.quantized.ring import BatchQuantizedRing, QuantizedRingRow

Q8 = KVQuant(bits=8, group_size=64)
Q4 = KVQuant(bits=4, group_size=32)


def kv(rng, b: int, n: int, d: int = 64) -> tuple[mx.array, mx.array]:
    k = mx.array(rng.standard_normal((b, 2, n, d)).astype(np.float32)).astype(mx.bfloat16)
    v = mx.array(rng.standard_normal((b, 2, n, d)).astype(np.float32)).astype(mx.bfloat16)
    return k, v


def same(a, b) -> bool:
    return all(mx.array_equal(x, y).item() for x, y in zip(a, b, strict=True))


def test_packed_layout_sizes_and_round_trip():
    x = kv(np.random.default_rng(0), 1, 3)[0]
    p = pack(x, Q4)  # 64 4-bit ints: 8 words; 2 groups of 32: 2 bf16 scales + 2 biases: 2
    assert p.dtype == mx.uint32 and p.shape == (1, 2, 3, 10)
    assert same(unpack(p, Q4, 64, mx.bfloat16), mx.quantize(x, group_size=32, bits=4))


def test_bad_settings_say_what_to_choose():
    with pytest.raises(ValueError, match=r"choose from \(4, 8\)"):
        KVQuant(bits=3)
    with pytest.raises(ValueError, match="choose from"):
        KVQuant(bits=4, group_size=16)


def test_switch_after_the_first_forward_then_rows_equal_serial_quantized():
    """Start 0: the first forward stays bf16 (mlx-lm quantizes after it), later writes
    are quantized; each row equals mlx-lm's QuantizedKVCache fed the same keys."""
    rng = np.random.default_rng(1)
    cache = BatchQuantizedKV([2, 0], Q8)
    k0, v0 = kv(rng, 2, 3)
    cache.update_and_fetch(k0, v0)
    assert not hasattr(cache, "bits") and cache.offset.tolist() == [1, 3]
    k1, v1 = kv(rng, 2, 1)
    keys, values = cache.update_and_fetch(k1, v1)
    assert cache.bits == 8 and cache.group_size == 64 and len(keys) == 3
    assert keys[0].shape == (2, 2, 4, 16) and cache.offset.tolist() == [2, 4]
    for row, pad in ((0, 2), (1, 0)):
        serial = KVCache()
        serial.update_and_fetch(k0[row : row + 1, :, pad:], v0[row : row + 1, :, pad:])
        serial = serial.to_quantized(group_size=64, bits=8)
        want = serial.update_and_fetch(k1[row : row + 1], v1[row : row + 1])
        got = cache.extract(row)
        assert isinstance(got, QuantizedKVCache) and got.offset == serial.offset
        assert same(got.keys, want[0]) and same(got.values, want[1])


def test_start_offset_switches_when_the_first_row_reaches_it():
    rng = np.random.default_rng(2)
    cache = BatchQuantizedKV([3, 0], KVQuant(bits=4, group_size=64, start=5))
    cache.update_and_fetch(*kv(rng, 2, 4))  # offsets [1, 4]
    cache.update_and_fetch(*kv(rng, 2, 1))  # max offset 4 < 5 before the write: bf16
    assert not cache.quantized and cache.offset.tolist() == [2, 5]
    keys, _ = cache.update_and_fetch(*kv(rng, 2, 1))  # row 1 is at 5: the batch switches
    assert cache.quantized and keys[0].dtype == mx.uint32 and cache.offset.tolist() == [3, 6]


def test_filter_trims_shared_padding_of_packed_columns():
    rng = np.random.default_rng(3)
    cache = BatchQuantizedKV([3, 1, 2], Q4)
    cache.update_and_fetch(*kv(rng, 3, 5))
    cache.update_and_fetch(*kv(rng, 3, 1))
    before = [cache.extract(i) for i in (0, 2)]
    cache.filter([0, 2])
    assert cache.left_padding.tolist() == [1, 0] and cache._idx == 4
    assert cache.offset.tolist() == [3, 4] and cache.keys.shape[1:] == (2, 256 - 2, 10)
    for i, want in enumerate(before):
        got = cache.extract(i)
        assert same(got.keys, want.keys) and same(got.values, want.values)


def test_extend_quantizes_a_bf16_side_and_lines_up_write_columns():
    rng = np.random.default_rng(4)
    a = BatchQuantizedKV([0], Q8)
    a.update_and_fetch(*kv(rng, 1, 4))
    a.update_and_fetch(*kv(rng, 1, 1))  # quantized, _idx 5
    b = BatchQuantizedKV([1], Q8)
    kb, vb = kv(rng, 1, 3)
    b.update_and_fetch(kb, vb)  # bf16, _idx 3, one padded column
    a.extend(b)
    assert a.quantized and b.quantized
    assert a.left_padding.tolist() == [0, 3] and a.offset.tolist() == [5, 2] and a._idx == 5
    got = a.extract(1)
    want = mx.quantize(kb[:, :, 1:], group_size=64, bits=8)
    assert got.offset == 2 and same(got.keys, want)


def test_merge_of_quantized_rows_round_trips():
    rng = np.random.default_rng(5)
    rows = []
    for n in (2, 5):
        c = QuantizedKVCache(group_size=32, bits=4)
        c.update_and_fetch(*kv(rng, 1, n))
        rows.append(c)
    merged = BatchQuantizedKV.merge_quantized(rows, Q4)
    assert merged.left_padding.tolist() == [3, 0] and merged.offset.tolist() == [2, 5]
    for i, want in enumerate(rows):
        got = merged.extract(i)
        assert got.offset == want.offset
        assert same(got.keys, tuple(x[..., : want.offset, :] for x in want.keys))
    with pytest.raises(ValueError, match="cannot join a batch"):
        BatchQuantizedKV.merge_quantized(rows, Q8)


def test_ring_wraps_like_the_bf16_ring_and_extracts_temporal_order():
    """The ring's moves on packed columns equal BatchRing's on bf16 ones, quantized:
    max_size 4, rows prefilled with 2 and 0 ids, then 3 decode writes (one wrap)."""
    rng = np.random.default_rng(6)
    ours = BatchQuantizedRing(4, [0, 2], Q8)
    plain = BatchRing(4, [0, 2])
    for n in (2, 1, 1, 1):
        k, v = kv(rng, 2, n)
        ours.update_and_fetch(k, v)
        plain.update_and_fetch(k, v)
    assert ours.quantized and ours.rotated and ours._idx == 1
    assert ours.left_padding.tolist() == plain.left_padding.tolist() == [-1, 1]
    assert ours.offset.tolist() == plain.offset.tolist() == [5, 3]
    for row in (0, 1):
        got, want = ours.extract(row), plain.extract(row)
        assert isinstance(got, QuantizedRingRow) and got.offset == want.offset
        assert mx.array_equal(got.keys, pack(want.keys, Q8)).item()
    assert mx.array_equal(ours.make_mask(1, return_array=True),
                          plain.make_mask(1, return_array=True)).item()


def test_ring_merge_round_trips_and_extend_unrolls_rings():
    rng = np.random.default_rng(7)
    ring, plain = BatchQuantizedRing(4, [0, 0], Q8), BatchRing(4, [0, 0])
    for n in (3, 1, 1, 1):
        k, v = kv(rng, 2, n)
        ring.update_and_fetch(k, v)
        plain.update_and_fetch(k, v)
    rows = [ring.extract(i) for i in (0, 1)]
    merged = BatchQuantizedRing.merge_quantized(rows, Q8)
    assert merged.offset.tolist() == [6, 6] and merged._idx == 4
    for i in (0, 1):
        assert mx.array_equal(merged.extract(i).keys, rows[i].keys).item()
    fresh, fresh_plain = BatchQuantizedRing(4, [0], Q8), BatchRing(4, [0])
    k, v = kv(rng, 1, 2)
    fresh.update_and_fetch(k, v)
    fresh_plain.update_and_fetch(k, v)
    ring.extend(fresh)  # one wrapped, one not (and bf16): temporal order, then quantized
    plain.extend(fresh_plain)
    assert not ring.rotated and fresh.quantized and ring._idx == plain._idx == 4
    assert ring.offset.tolist() == plain.offset.tolist() == [6, 6, 2]
    assert ring.left_padding.tolist() == plain.left_padding.tolist() == [-2, -2, 2]
    for i in range(3):
        assert mx.array_equal(ring.extract(i).keys, pack(plain.extract(i).keys, Q8)).item()


def test_nbytes_counts_packed_bytes():
    cache = BatchQuantizedKV([0, 0], KVQuant(bits=4, group_size=64))
    rng = np.random.default_rng(8)
    cache.update_and_fetch(*kv(rng, 2, 3))
    bf16 = cache.nbytes
    cache.update_and_fetch(*kv(rng, 2, 1))
    assert bf16 == 2 * (2 * 2 * 256 * 64 * 2)  # keys + values, 256 columns, bf16
    assert cache.nbytes == 2 * (2 * 2 * 256 * 9 * 4)  # 9 uint32 words per key


def test_rotated_keys_are_stored_quantized_and_served_unrotated():
    """kv4h: the cache stores quantize(k H) and serves dequantize(.) H, H orthonormal."""
    from batchlab.engine.paths.quantized.rotated import BatchRotatedKV, hadamard

    h = hadamard(4, "float32")
    assert (h * 2).tolist() == [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    assert mx.array_equal(hadamard(64, "float32") @ hadamard(64, "float32"), mx.eye(64)).item()
    with pytest.raises(ValueError, match="power-of-two"):
        hadamard(48, "float32")
    rng = np.random.default_rng(9)
    cache = BatchRotatedKV([0], KVQuant(bits=4, group_size=64))
    k0, v0 = kv(rng, 1, 3)
    cache.update_and_fetch(k0, v0)
    k1, v1 = kv(rng, 1, 1)
    keys, values = cache.update_and_fetch(k1, v1)
    assert not hasattr(cache, "bits") and keys.dtype == mx.bfloat16 and keys.shape == (1, 2, 4, 64)
    stored = pack(k1 @ hadamard(64, "bfloat16"), KVQuant(bits=4, group_size=64))
    assert mx.array_equal(cache.keys[:, :, 3:4], stored).item()
    want = mx.dequantize(*mx.quantize(k1 @ hadamard(64, "bfloat16"), group_size=64, bits=4),
                         group_size=64, bits=4) @ hadamard(64, "bfloat16")
    assert mx.array_equal(keys[:, :, 3:4], want).item()


@pytest.mark.parametrize("mask", ["none", "array", "causal"])
def test_the_cuda_form_of_quantized_attention_computes_mlx_lms(mask):
    """quantized_attention.py (what the quantized paths run on CUDA, where mlx-lm's has no
    kernel: dequantize, then fused attention) gives mlx-lm's quantized attention."""
    from mlx_lm.models.base import quantized_scaled_dot_product_attention

    from batchlab.engine.kernels.quantized_attention import quantized_attention

    mx.random.seed(1)
    q = mx.random.normal((2, 8, 3, 64))
    k, v = mx.random.normal((2, 2, 11, 64)), mx.random.normal((2, 2, 11, 64))
    qk, qv = mx.quantize(k, group_size=64, bits=4), mx.quantize(v, group_size=64, bits=4)
    m = {"none": None, "causal": "causal",
         "array": mx.random.uniform(shape=(2, 1, 3, 11)) > 0.3}[mask]
    ours = quantized_attention(q, qk, qv, 0.125, m, 64, 4)
    theirs = quantized_scaled_dot_product_attention(q, qk, qv, 0.125, m, 64, 4)
    assert mx.allclose(ours, theirs, atol=1e-5)

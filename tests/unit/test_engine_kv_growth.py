"""BatchKV past its first 256 columns, against mlx-lm's BatchKVCache, bit for bit.

No default-matrix cell decodes a cache past 256 keys (prompts <= 26 tokens, 12 steps;
issue 14 asks for such cells). Here one cache grows three times, once with a
multi-token write that straddles the boundary (the partly used tail is cut first), and
every key, value, offset and the decode mask are compared with mlx-lm's.
"""


import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import BatchKVCache

from batchlab.engine.caches.kv import BatchKV


def _bits(x: mx.array) -> np.ndarray:
    return np.asarray(x.view(mx.uint32))


def _write(ours, theirs, rng, n: int) -> None:
    keys = mx.array(rng.standard_normal((2, 1, n, 2)).astype(np.float32))
    values = keys * 2
    got, want = ours.update_and_fetch(keys, values), theirs.update_and_fetch(keys, values)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.array_equal(_bits(g), _bits(w))


def test_keys_grow_in_steps_of_256_like_mlx_lm():
    rng = np.random.default_rng(7)
    ours, theirs = BatchKV([1, 0]), BatchKVCache([1, 0])
    widths = []
    _write(ours, theirs, rng, 250)  # a prefill: one allocation of 256 columns
    widths.append(ours.keys.shape[2])
    for _ in range(4):
        _write(ours, theirs, rng, 1)  # _idx 254
    _write(ours, theirs, rng, 5)  # 259 > 256: the tail past 254 is cut, 256 more added
    widths.append(ours.keys.shape[2])
    while ours._idx < 511:
        _write(ours, theirs, rng, 1)  # crosses 510: a third allocation
    widths.append(ours.keys.shape[2])
    assert widths == [256, 510, 766]
    assert ours.keys.shape == theirs.keys.shape
    assert ours._idx == theirs._idx == 511
    assert ours.offset_host.tolist() == np.asarray(theirs.offset).tolist() == [510, 511]
    assert np.array_equal(_bits(ours.keys), _bits(theirs.keys))
    assert np.array_equal(_bits(ours.values), _bits(theirs.values))
    mask, want = ours.make_mask(1, return_array=True), theirs.make_mask(1, return_array=True)
    assert mask.shape == want.shape == (2, 1, 1, 512)
    assert np.array_equal(np.asarray(mask), np.asarray(want))


"""Single-row caches: what the batch caches' ``extract`` returns and ``merge`` takes.

These are mlx-lm's own single-row classes (``KVCache``, ``RotatingKVCache``,
``ArraysCache``, ``CacheList``), not copies. They are not batch caches (the rule forbids
only those), and using them keeps extracted rows interchangeable with mlx-lm prompt
caches: a row extracted here can be merged by mlx-lm and the other way round, and the
differential tests compare extracted rows field by field.

Only their constructors and plain fields are used. Never call ``KVCache.merge`` /
``RotatingKVCache.merge``: those forward to mlx-lm's batch caches. Merging goes through
``batchlab.engine.core.layers.merge_rows``.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache


def kv_row(keys: mx.array, values: mx.array) -> KVCache:
    """A ``KVCache`` holding exactly ``keys``/``values`` (1, H, n, D); offset = n."""
    cache = KVCache()
    cache.keys, cache.values = mx.contiguous(keys), mx.contiguous(values)
    cache.offset = cache.keys.shape[2]
    return cache


def ring_row(max_size: int, keys: mx.array, values: mx.array, offset: int) -> RotatingKVCache:
    """A ``RotatingKVCache`` (keep=0) holding ``keys``/``values`` in temporal order.

    ``offset`` is the row's RoPE position, which can exceed the number of keys once the
    window has dropped old ones; the write pointer sits after the last key.
    """
    cache = RotatingKVCache(max_size)
    cache.keys, cache.values = mx.contiguous(keys), mx.contiguous(values)
    cache.offset = offset
    cache._idx = cache.keys.shape[2]
    return cache


def ring_temporal(cache: RotatingKVCache, v: mx.array) -> mx.array:
    """``v`` (keys or values of ``cache``) in temporal order, unused tail cut.

    The same rearrangement as ``RotatingKVCache._temporal_order``: with ``_idx`` short
    of ``offset`` the ring has wrapped and the oldest keys start at ``_idx``.
    """
    keep, idx = cache.keep, cache._idx
    if idx == v.shape[2]:
        return v
    if idx < cache.offset:
        return mx.concatenate([v[..., :keep, :], v[..., idx:, :], v[..., keep:idx, :]], axis=2)
    return v[..., :idx, :]


def state_row(arrays: Sequence[mx.array | None]) -> ArraysCache:
    """An ``ArraysCache`` holding one row's arrays (``None`` stays ``None``)."""
    cache = ArraysCache(len(arrays))
    cache.cache = list(arrays)
    return cache


def list_row(caches: Sequence) -> CacheList:
    return CacheList(*caches)

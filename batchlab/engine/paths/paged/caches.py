"""The paged path's cache factory (``core/factory.py``'s protocol), owning the pools.

Every full-attention layer gets one ``LayerPool`` (its own block manager and arrays),
made at the first batch and shared by every batch of the scheduler that owns this
factory, so joining a prompt batch to the decode batch moves block tables, never keys.
Sliding-window layers keep l1's ring (``BatchRing``): its width is bounded by the window,
so it wastes at most a window per row; SSM and conv state stay per row (``BatchState``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from mlx import nn

from batchlab.engine.core import layers
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.paths.paged.block_manager import DEFAULT_BLOCK_SIZE, BlockManager, BlockStats
from batchlab.engine.paths.paged.cache import PagedKV
from batchlab.engine.paths.paged.pool import LayerPool


class _LayerCursor:
    """Hands the k-th full-attention layer of a walk its pool: ``layers`` builds and
    merges caches in model order, so the k-th ``kv_class`` call is the k-th KV layer."""

    def __init__(self, caches: PagedCaches):
        self.caches = caches
        self.k = 0

    def _next_pool(self) -> LayerPool:
        pool = self.caches.pool(self.k)
        self.k += 1
        return pool

    def __call__(self, left_padding: Sequence[int]) -> PagedKV:
        return PagedKV(left_padding, self._next_pool())

    def merge(self, rows: Sequence) -> PagedKV:
        return PagedKV.merged_into(self._next_pool(), rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class PagedCaches(BatchCaches):
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None  # per layer; None: the pools grow
    pools: list = field(default_factory=list)  # LayerPool per full-attention layer

    def pool(self, k: int) -> LayerPool:
        while len(self.pools) <= k:
            self.pools.append(LayerPool(BlockManager(self.block_size, self.num_blocks)))
        return self.pools[k]

    def fresh(self, model: nn.Module, n: int) -> list:
        return layers.make_batch_caches(model, n, kv_class=_LayerCursor(self))

    def merged(self, model: nn.Module, per_row: Sequence[Sequence]) -> list:
        layers.refuse_unbatchable(model)
        return layers.merge_layers(per_row, kv_class=_LayerCursor(self))

    def fresh_with_prefix(self, model: nn.Module, prefixes: Sequence[Sequence[int]]) -> list:
        """Caches for ``len(prefixes)`` admitted rows, row i already holding the cached
        blocks of ``prefixes[i]`` (whole blocks, maybe none), laid out as ``merged`` lays
        rows with history (left-padded to the longest). Only for models whose every
        cache is a ``PagedKV`` (a ring or a state has no cached prefix to start from)."""
        caches = self.fresh(model, len(prefixes))
        width = max(len(p) for p in prefixes)
        sizes = np.array([len(p) for p in prefixes], dtype=np.int64)
        for cache in layers.leaves(caches):
            for table, prefix in zip(cache.rows, prefixes):
                cache.manager.share_prefix(table, prefix)
            cache.left_padding = width - sizes
            cache.offset = sizes
            cache._idx = width
        return caches

    def stats(self) -> BlockStats | None:
        """The first full-attention layer's blocks (every layer holds the same rows, so
        the same counts); None before the first batch or with no such layer."""
        return self.pools[0].manager.stats() if self.pools else None

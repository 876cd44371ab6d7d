"""PagedKV: a full-attention batch cache whose rows live in blocks of a layer pool.

What the model sees is l1's ``BatchKV`` exactly: the same ``offset`` (RoPE), the same
``left_padding`` and write column ``_idx``, the same masks, and ``update_and_fetch``
returning keys (B, H, _idx, D) with row b's tokens in columns ``[_idx - n_b, _idx)``.
Only the storage differs: row b's ``n_b`` tokens sit in ``ceil(n_b / block_size)``
blocks of the pool (``table.py``), with no padding stored; the padded view is gathered
per forward, its padding read from the zero block. Three prompts [1, 3, 5], [7] and
[2, 6, 8, 9] at block size 2 store 2 + 1 + 2 blocks, and gather as BatchKV holds them::

    row 0: 0 1 3 5      left_padding = [1, 3, 0], _idx = 4
    row 1: 0 0 0 7
    row 2: 2 6 8 9

So wherever l1 is bit-exact, so is this cache, but for one thing: a prefix hit (a full
block whose chained hash and ids are cached already) makes a row read another row's
keys for the same ids at the same positions, equal bits where the backend computes a row
independently of its neighbours (the CPU: shared/FACTS.md). The prefix cells check it.

Token ids for the prefix cache come from the scheduler (``pending_ids``, set before a
prefill forward); tokens written without ids (decode steps, merged history) are stored,
never hashed.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from batchlab.engine.caches.kv import BatchKV, as_rows
from batchlab.engine.caches.single import kv_row
from batchlab.engine.paths.paged.pool import LayerPool
from batchlab.engine.paths.paged.table import BlockTable


class PagedKV(BatchKV):
    def __init__(self, left_padding: Sequence[int], pool: LayerPool):
        super().__init__(left_padding)
        self.pool = pool
        # a tuple, not a list: ``caches/split.py``'s twin copies lists; ``__copy__`` forks
        self.rows: tuple[BlockTable, ...] = tuple(BlockTable() for _ in range(len(left_padding)))
        self.pending_ids: tuple[list, ...] | None = None  # ids the next writes feed, per row

    def __copy__(self) -> PagedKV:
        """A twin for ``split_rows``: every row's table forked (each block gains a
        reference), so the twin's ``filter`` and the original's release their own."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.rows = tuple(self.pool.manager.fork(t) for t in self.rows)
        return out

    @property
    def manager(self):
        return self.pool.manager

    @property
    def state(self):
        return () if self.pool.keys is None else (self.pool.keys, self.pool.values)

    @property
    def nbytes(self) -> int:  # not gated: protocol
        """The bytes this batch's rows hold in the pool (whole blocks)."""
        blocks = sum(len(t.blocks) for t in self.rows)
        return blocks * self.pool.block_size * self.pool.token_bytes()

    def token_bytes(self) -> int:
        return self.pool.token_bytes()

    # -- the protocol the models speak ----------------------------------------------

    def _take_ids(self, n: int) -> list[list]:
        pending = self.pending_ids
        if pending is None:
            return [[None] * n for _ in self.rows]
        self.pending_ids = tuple(p[n:] for p in pending)
        return [(p[:n] + [None] * n)[:n] for p in pending]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n = keys.shape[2]
        slots = [s for t, ids in zip(self.rows, self._take_ids(n))
                 for s in self.manager.append(t, ids)]
        self.pool.write(slots, keys, values)
        for t in self.rows:
            self.manager.seal(t)
        self.offset_ints.shift(n)
        self._idx += n
        return self.keys_and_values()

    def _index(self, rows: Sequence[BlockTable], width: int) -> np.ndarray:
        """(len(rows), width) pool rows: each row right-justified, the zero block left."""
        bs = self.pool.block_size
        index = np.zeros((len(rows), width), dtype=np.int64)
        lane = np.arange(bs)
        for b, t in enumerate(rows):
            n = min(t.num_tokens, width)
            if n:
                slots = (np.asarray(t.blocks)[:, None] * bs + lane).reshape(-1)
                index[b, width - n :] = slots[t.num_tokens - n : t.num_tokens]
        return index

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        return self.pool.gather(self._index(self.rows, max(self._idx, 0)))

    # -- prefill of right-padded prompts ----------------------------------------------

    def finalize(self) -> None:
        """Right padding dropped from the tables (BatchKV rolls it to the left)."""
        if self._right_padding is None:  # not gated: unprepared
            return
        pad = self._right_padding
        for t, p in zip(self.rows, pad.tolist()):
            self.manager.truncate(t, p)
        self.offset = self.offset_host - pad
        self.left_padding = self.left_padding_host + pad
        self._right_padding = None

    # -- dynamic B ---------------------------------------------------------------------

    def filter(self, indices) -> None:
        rows = as_rows(indices)
        keep = set(rows)
        for i, t in enumerate(self.rows):
            if i not in keep:
                self.manager.release(t)
        self.rows = tuple(self.rows[i] for i in rows)
        self.pending_ids = None
        self.offset = self.offset_host[rows]
        self.left_padding = self.left_padding_host[rows]
        if self._right_padding is not None:  # not gated: mid-prefill
            self._right_padding = self._right_padding[rows]
        trim = int(self.left_padding_host.min()) if rows else 0
        if trim > 0:
            self._idx -= trim  # as BatchKV: the columns every row pads are dropped
            self.left_padding = self.left_padding_host - trim

    def extend(self, other: PagedKV) -> None:
        if self._right_padding is not None or other._right_padding is not None:  # not gated: misuse
            raise ValueError("finalize() both caches before extend()")
        if other.pool is not self.pool:  # not gated: misuse
            raise ValueError("paged caches of two pools cannot be joined")
        # BatchKV's aligned extend: the write columns meet at the larger _idx. (A side
        # that never wrote has _idx 0 and no padding, so with neither written this is
        # BatchKV's join of the ints alone.)
        idx = max(self._idx, other._idx)
        self.left_padding = np.concatenate([self.left_padding_host + (idx - self._idx),
                                            other.left_padding_host + (idx - other._idx)])
        self._idx = idx
        self.offset = np.concatenate([self.offset_host, other.offset_host])
        self.rows = self.rows + other.rows
        other.rows = ()  # the tables moved: ``other`` is dropped by its batch
        self.pending_ids = None

    def extract(self, idx: int) -> KVCache:
        t = self.rows[idx]
        keys, values = self.pool.gather(self._index([t], t.num_tokens))
        return kv_row(keys, values)

    @classmethod
    def merged_into(cls, pool: LayerPool, caches: Sequence[KVCache]) -> PagedKV:
        """BatchKV.merge's layout (left-padded to the longest), each row's keys copied
        into fresh blocks of ``pool`` (their ids unknown: never hashed)."""
        sizes = [c.size() for c in caches]
        width = max(sizes)
        cache = cls([width - s for s in sizes], pool)
        for t, c, s in zip(cache.rows, caches, sizes):
            if s:
                slots = pool.manager.append(t, [None] * s)
                keys, values = c.keys[..., :s, :], c.values[..., :s, :]
                pool.write(slots, keys, values)
        if width:
            cache.offset = cache.offset_host + width
            cache._idx = width
        return cache

    def release_all(self) -> None:
        """Give every row's blocks back."""
        rows, self.rows = self.rows, ()
        for t in rows:
            self.manager.release(t)

    def __del__(self) -> None:
        # The scheduler drops a batch's caches whole when its last row leaves (``filter``
        # is not called with no rows), and a split drops its twin's rows the same way:
        # whatever tables a cache still holds when it goes are released then.
        rows = self.__dict__.get("rows", ())
        if rows:
            self.release_all()


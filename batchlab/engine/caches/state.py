"""BatchState (SSM / conv state of a batch) and BatchList (several caches per layer).

``BatchState`` holds a layer's state arrays, each (B, ...), like mlx-lm 0.32's batch-aware
``ArraysCache`` (own code). Models read and write it as ``cache[0]``, ``cache[1]``,
``cache.lengths``, ``cache.advance(S)`` and ``make_mask``. A state has no sequence axis, so
padding is handled by masking the steps that are not real:

- ``left_padding[b]``: the first steps of the next input that are padding;
- ``lengths[b]``: steps of the next input that are real (set by ``prepare`` for a
  right-padded prefill); ``advance(S)`` lowers both by S after each forward.

E.g. lengths [3, 1] prefilled as one chunk of 3: ``make_mask(3)`` is
``[T T T], [T F F]``; after ``advance(3)`` lengths are [0, -2].

mlx-lm's choices that change which code path a model takes are kept: merging fresh
caches gives ``left_padding`` = zeros (an all-True mask array, not ``None``) until
``finalize``; merging caches with content gives ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import ArraysCache, CacheList

from batchlab.engine.caches.kv import LeftPaddedKV, as_rows
from batchlab.engine.caches.mask import all_true, ssm_keeps_every_step, ssm_mask
from batchlab.engine.caches.rowints import RowInts, RowIntsAttribute
from batchlab.engine.caches.single import list_row, state_row


class BatchState:
    """Per-row state arrays of a state-space or conv layer (``ArraysCache`` semantics)."""

    left_padding = RowIntsAttribute()
    lengths = RowIntsAttribute()

    def __init__(self, size: int, left_padding: Sequence[int] | None = None):
        self.cache: list[mx.array | None] = [None] * size
        self.left_padding_ints = RowInts("BatchState.left_padding", optional=True)
        self.lengths_ints = RowInts("BatchState.lengths", optional=True)
        # as ArraysCache: an empty list means no padding tracked at all
        has_padding = left_padding is not None and len(left_padding) > 0
        self.left_padding = list(left_padding) if has_padding else None
        self.lengths = None

    def __getitem__(self, idx: int) -> mx.array | None:
        return self.cache[idx]

    def __setitem__(self, idx: int, value: mx.array | None) -> None:
        self.cache[idx] = value

    @property
    def batch_size(self) -> int:
        for c in self.cache:
            if c is not None:
                return c.shape[0]
        for rows in (self.left_padding_host, self.lengths_host):
            if rows is not None:
                return len(rows)
        return 1  # not gated: no arrays

    @property
    def state(self):
        return self.cache, self.left_padding, self.lengths

    @state.setter
    def state(self, v) -> None:  # not gated: protocol
        self.cache, self.left_padding, self.lengths = v

    def make_mask(self, N: int) -> mx.array | None:
        """mlx-lm's mask (``mask.ssm_mask``), except a decode step's that keeps every row,
        dropped where that cannot change a bit (``LeftPaddedKV.drops_all_true_decode_mask``:
        the CPU backend, where the models apply it with plain selects and products)."""
        drop = N == 1 and self.drops_all_true_decode_mask()
        rows = self._rows_if_every_step_kept(N)
        if rows is not None:  # a decode step's usual case, answered without numpy
            return None if drop else all_true((rows, N))
        return ssm_mask(N, self.left_padding_host, self.lengths_host)

    def _rows_if_every_step_kept(self, N: int) -> int | None:
        """B when ``ssm_mask`` would keep every step of every row (from the memoized
        extremes of the tracked ints), else None (also when nothing is tracked)."""
        lp, lengths = self.left_padding_ints, self.lengths_ints
        tracked = [ints for ints in (lp, lengths) if ints.is_set]
        if not tracked:
            return None
        lp_max = lp.bounds()[1] if lp.is_set else None
        lengths_min = lengths.bounds()[0] if lengths.is_set else None
        if not ssm_keeps_every_step(N, lp_max, lengths_min):
            return None
        return len(tracked[0])

    drops_all_true_decode_mask = staticmethod(LeftPaddedKV.drops_all_true_decode_mask)

    def advance(self, N: int) -> None:
        self.lengths_ints.shift(-N)  # no-ops where not tracked
        self.left_padding_ints.shift(-N)

    def prepare(self, *, lengths=None, right_padding=None) -> None:
        """``lengths`` of a right-padded prefill. No ``left_padding`` (nor ``empty``,
        ``size``, ``trim``): nothing the engine runs calls them on a batch cache (kv.py's
        module doc)."""
        if lengths is not None:  # one way: padded prefill
            self.lengths = lengths

    def finalize(self) -> None:
        self.lengths = None
        self.left_padding = None

    def filter(self, indices) -> None:
        rows = as_rows(indices)
        take = mx.array(rows, dtype=mx.int32)
        self.cache = [None if c is None else c[take] for c in self.cache]
        if self.left_padding_host is not None:
            self.left_padding = self.left_padding_host[rows]
        if self.lengths_host is not None:  # not gated: mid-prefill
            self.lengths = self.lengths_host[rows]

    def extend(self, other: BatchState) -> None:
        """Append ``other``'s rows; a side that lacks an array gets zeros (None + None
        stays None), for the state arrays and for left_padding/lengths alike."""
        a, b = self.batch_size, other.batch_size
        self.cache = [_cat(x, y, a, b) for x, y in zip(self.cache, other.cache)]
        self.left_padding = _cat_rows(self.left_padding_host, other.left_padding_host, a, b)
        self.lengths = _cat_rows(self.lengths_host, other.lengths_host, a, b)

    def extract(self, idx: int) -> ArraysCache:
        """Row ``idx`` as mlx-lm's ``ArraysCache`` (mlx-lm's own extract fails on a
        ``None`` entry; here it stays ``None``)."""
        return state_row([None if c is None else c[idx : idx + 1] for c in self.cache])

    @classmethod
    def merge(cls, caches: Sequence[ArraysCache]) -> BatchState:
        """Stack single-row states; a row without an array gets zeros. All empty (the
        fresh caches of new prompts): no arrays and left_padding = zeros."""
        n = len(caches)
        merged = cls(len(caches[0].cache))
        if all(c.cache[0] is None for c in caches):
            merged.left_padding = [0] * n
            return merged
        for e in range(len(merged.cache)):
            present = [c.cache[e] for c in caches if c.cache[e] is not None]
            zero = mx.zeros((1, *present[0].shape[1:]), present[0].dtype)
            merged.cache[e] = mx.concatenate(
                [zero if c.cache[e] is None else c.cache[e].astype(zero.dtype) for c in caches]
            )
        return merged

    @property
    def nbytes(self) -> int:  # not gated: protocol
        return sum(c.nbytes for c in self.cache if c is not None)

    def token_bytes(self) -> None:
        """None: state is as large at one token as at any length (``row_bytes``)."""
        return None

    def row_bytes(self) -> int:
        rows = max(self.batch_size, 1)
        return sum(c.nbytes for c in self.cache if c is not None) // rows


def _cat(x: mx.array | None, y: mx.array | None, a: int, b: int) -> mx.array | None:
    like = y if y is not None else x
    if like is None:  # not gated: empty extend
        return None
    if x is None:  # not gated: empty extend
        x = mx.zeros((a, *like.shape[1:]), like.dtype)
    if y is None:
        y = mx.zeros((b, *like.shape[1:]), like.dtype)
    return mx.concatenate([x, y])


def _cat_rows(x: np.ndarray | None, y: np.ndarray | None, a: int, b: int):
    if x is None and y is None:
        return None
    x = np.zeros(a, np.int64) if x is None else x
    y = np.zeros(b, np.int64) if y is None else y
    return np.concatenate([x, y])


class BatchList:
    """Several caches for one layer (mlx-lm's ``CacheList``); every call delegates."""

    def __init__(self, *caches):
        self.caches = tuple(caches)

    def __getitem__(self, idx: int):
        return self.caches[idx]

    @property
    def state(self):  # not gated: protocol
        return [(c.state, type(c).__name__) for c in self.caches]

    def filter(self, indices) -> None:
        for c in self.caches:
            c.filter(indices)

    def extend(self, other: BatchList) -> None:
        for c, o in zip(self.caches, other.caches):
            c.extend(o)

    def extract(self, idx: int) -> CacheList:
        return list_row([c.extract(idx) for c in self.caches])

    def prepare(self, **kwargs) -> None:
        for c in self.caches:
            c.prepare(**kwargs)

    def finalize(self) -> None:
        for c in self.caches:
            c.finalize()

    @property
    def nbytes(self) -> int:  # not gated: protocol
        return sum(c.nbytes for c in self.caches)

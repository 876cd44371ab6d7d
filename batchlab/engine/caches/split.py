"""Splitting rows off a batch cache: a twin that holds only the rows taken.

Every batch cache filters itself in place (``filter``), rebinding its arrays to new ones
and its per-row ints to new vectors; so a twin that shares the original's arrays but owns
its containers and per-row ints can be filtered without touching the original:

    taken = split_rows(cache, [0, 2])   # a new cache with rows 0 and 2
    cache.filter([1])                   # the original keeps row 1

That is what ``PromptBatch.split`` needs when prefilled rows leave for the decode batch,
without copying every key (the copy a deepcopy makes is discarded by the filter anyway).
"""

from __future__ import annotations

import copy

from batchlab.engine.caches.mask import DecodeMasks
from batchlab.engine.caches.rowints import RowInts


def twin(cache):
    """A shallow copy of ``cache`` with its own per-row ints, lists and mask memo."""
    out = copy.copy(cache)
    for name, value in vars(cache).items():
        if isinstance(value, RowInts):
            setattr(out, name, value.copy())
        elif isinstance(value, DecodeMasks):
            setattr(out, name, DecodeMasks())
        elif isinstance(value, list):
            setattr(out, name, list(value))
        elif isinstance(value, tuple) and value and hasattr(value[0], "filter"):
            setattr(out, name, tuple(twin(c) for c in value))  # BatchList's parts
    return out


def split_rows(cache, take: list[int]):
    """A new cache holding rows ``take`` of ``cache`` (in that order); ``cache`` is
    unchanged."""
    out = twin(cache)
    out.filter(take)
    return out

"""The server's prompt cache: finished rows' caches, reused by later requests that share
a prefix (``--prompt-cache-size`` entries, ``--prompt-cache-bytes``), after mlx_lm.server's
``LRUPromptCache`` (mlx_lm/models/cache.py).

An entry is one finished row's ``History``: its single-row caches (the engine's
``extract``, mlx-lm's own classes) and every id they hold (prompt + emitted tokens: each
emitted token was fed by the forward that emitted it; the one sampled last never was). A
new prompt takes the entry that lets it skip the most prefill, and prefills only the rest:

    cached  [1 2 3 4 5 6]   prompt [1 2 3 4 5 6 7 8]  -> reuse 6, prefill [7 8]
    cached  [1 2 3 4 5 6]   prompt [1 2 3 9]          -> trim to 3, prefill [9]
    cached  [1 2 3 4]       prompt [1 2 3 4]          -> trim to 3, feed [4]

A request always feeds at least its last prompt token (the engine's first decode step
does), so an entry equal to the prompt is trimmed by one. Trimming rewinds a cache, and
only some layers can rewind (mlx-lm's ``is_trimmable``, the rule here too):

- full attention (``KVCache``): always; the keys past the kept length are ignored.
- sliding window (``RotatingKVCache``): only while it holds fewer tokens than its window;
  once full, the oldest keys are overwritten and a shorter prefix's window is gone.
- SSM / conv state (``ArraysCache``): never; a state sums up every token it has seen.

An entry with any layer that cannot rewind is usable only whole: when it is a strict
prefix of the prompt. Among equally long matches the one that needs no trim wins, then
the most recently used. A hit refreshes its entry (LRU; mlx-lm refreshes on insert only).

Inserting an entry that can rewind drops the entries that are prefixes of it (it serves
them by a trim), as mlx-lm does; then the least recently used go until at most
``max_entries`` remain and their bytes are at most ``max_bytes`` (an entry larger than
that alone is not kept). Only the engine thread calls ``fetch`` and ``insert``.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import ArraysCache, CacheList

from batchlab.defaults import DEFAULT_PROMPT_CACHE_SIZE
from batchlab.engine.core.history import History
from batchlab.engine.core.layers import leaves


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCacheStats:
    entries: int
    nbytes: int  # the entries' KV / state bytes
    max_entries: int
    max_bytes: int | None  # None: no cap
    hits: int  # requests that joined with a cached prefix
    misses: int  # requests that found none
    cached_tokens: int  # prompt tokens the hits did not prefill


@dataclass(slots=True, kw_only=True)
class _Entry:
    history: History
    ids: np.ndarray  # history.tokens, for fast prefix comparison
    nbytes: int
    trimmable: bool


class PromptCache:
    def __init__(self, max_entries: int = DEFAULT_PROMPT_CACHE_SIZE,
                 max_bytes: int | None = None):
        if max_entries < 0:
            raise ValueError("--prompt-cache-size must be >= 0 (0 turns the cache off)")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("--prompt-cache-bytes must be a positive number of bytes")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()  # LRU first
        self._nbytes = self._hits = self._misses = self._cached_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> PromptCacheStats:
        return PromptCacheStats(entries=len(self._entries), nbytes=self._nbytes,
                                max_entries=self.max_entries, max_bytes=self.max_bytes,
                                hits=self._hits, misses=self._misses,
                                cached_tokens=self._cached_tokens)

    def fetch(self, prompt: tuple[int, ...]) -> History | None:
        """The history to join ``prompt`` with (caches of their own, trimmed to the reused
        length; ``tokens`` = the reused ids, ``prompt[:len(tokens)]``), or None."""
        if not self.enabled:
            return None
        best = self._best(prompt)
        if best is None:
            self._misses += 1
            return None
        key, reuse = best
        entry = self._entries[key]
        self._entries.move_to_end(key)
        self._hits += 1
        self._cached_tokens += reuse
        caches = [_own_copy(c) for c in entry.history.caches]
        trim = len(key) - reuse
        if trim:
            for c in caches:
                c.trim(trim)
        return History(caches=caches, tokens=tuple(prompt[:reuse]))

    def _best(self, prompt: tuple[int, ...]) -> tuple[tuple[int, ...], int] | None:
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_rank = None, None
        for key, entry in self._entries.items():  # LRU first: a later equal rank wins
            common = _common_prefix(entry.ids, ids)
            if common == len(key) < len(prompt):
                reuse = common  # a strict prefix: usable whole, by every layer kind
            elif entry.trimmable:
                reuse = min(common, len(prompt) - 1)
            else:
                continue
            if reuse < 1:
                continue
            rank = (reuse, reuse - len(key))  # longest, then the least trimmed
            if best_rank is None or rank >= best_rank:
                best, best_rank = (key, reuse), rank
        return best

    def insert(self, history: History) -> None:
        """Keep a finished row's caches (the engine's own: nobody writes them after)."""
        key = tuple(history.tokens)
        if not self.enabled or not key:
            return
        arrays = _arrays(history.caches)
        nbytes = sum(a.nbytes for a in arrays)
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return
        mx.async_eval(arrays)  # sliced from the batch's buffers: once computed, those can go
        trimmable = all(c.is_trimmable() for c in history.caches)
        self._drop(key)
        if trimmable:
            for other in [k for k in self._entries if len(k) < len(key) and key[:len(k)] == k]:
                self._drop(other)
        self._entries[key] = _Entry(history=history, ids=np.asarray(key, dtype=np.int64),
                                    nbytes=nbytes, trimmable=trimmable)
        self._nbytes += nbytes
        while len(self._entries) > self.max_entries or (
                self.max_bytes is not None and self._nbytes > self.max_bytes):
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self._nbytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._nbytes -= entry.nbytes


def _arrays(caches: list) -> list[mx.array]:
    """Every array of one row's caches: keys and values, or the state arrays. A quantized
    cache's keys and values are each a tuple (packed, scales, biases): all three count."""
    out = []
    for c in leaves(caches):
        parts = c.cache if isinstance(c, ArraysCache) else (c.keys, c.values)
        for part in parts:
            out += [a for a in (part if isinstance(part, (tuple, list)) else (part,))
                    if a is not None]
    return out


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def _own_copy(cache):
    """A cache object of its own over the same arrays, so a trim (it moves offsets) leaves
    the entry whole. The arrays need no copy: the engine's merge reads them into new
    batch buffers (``BatchKV.merge``, ``BatchRing.merge``, ``BatchState.merge``) and
    never writes into a single-row cache."""
    new = copy.copy(cache)
    if isinstance(cache, CacheList):
        new.caches = [_own_copy(c) for c in cache.caches]
    elif isinstance(cache, ArraysCache):
        new.cache = list(cache.cache)
    return new

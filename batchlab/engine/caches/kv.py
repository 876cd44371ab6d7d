"""BatchKV: the full-attention KV cache of a batch, rows left-padded to a shared length.

Three prompts ``[1, 3, 5]``, ``[7]`` and ``[2, 6, 8, 9]`` sit in the cache as::

    col:   0  1  2  3        left_padding = [1, 3, 0]
    row 0: .  1  3  5        offset       = [3, 1, 4]   (RoPE position of the next token)
    row 1: .  .  .  7        _idx         = 4           (shared write index)
    row 2: 2  6  8  9

Every row writes at the same column ``_idx``; ``offset[b] = _idx - left_padding[b]``.
The mask hides each row's first ``left_padding[b]`` columns.

The layout reproduces mlx-lm 0.32's ``BatchKVCache`` exactly (columns, padding, growth
in steps of 256, ``filter`` trimming shared padding, ``extend`` padding both sides), since
on the GPU the bits of attention depend on the key length and where each key sits.

Per-row ints (``offset``, ``left_padding``) live on the host (``rowints.py``): mlx-lm
keeps them as lazy device arrays and syncs (``.tolist()``) to filter or extract.

``LeftPaddedKV`` is what BatchKV and BatchRing (``ring.py``) share: the per-row ints,
the state they hand the models, the merge layout, and the row take and aligned extend
of ``filter``/``extend``.

mlx-lm's batch caches also have ``empty``, ``size``, ``is_trimmable``, ``trim`` and
``prepare(left_padding=)``: its BatchGenerator's callers use them (a prompt cache,
speculative decoding's rewind of single-row caches). Nothing the engine runs calls them on
a batch cache: mlx-lm's model modules call ``update_and_fetch``, ``make_mask``, ``offset``
and ``state``; the scheduler prepares with lengths and right padding only; serve's prompt
cache trims the extracted rows, which are mlx-lm's own single-row caches. So the engine's
batch caches do not have them (round 5 of the mutation campaign, docs/mutation.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from batchlab.engine.caches.mask import DecodeMasks, causal_mask
from batchlab.engine.caches.rowints import RowInts, RowIntsAttribute, host_ints
from batchlab.engine.caches.single import kv_row

STEP = 256  # keys/values grow in steps of 256 columns, as mlx-lm's caches do


def roll_rows(x: mx.array, shifts: np.ndarray) -> mx.array:
    """Roll row b of ``x`` (B, H, L, D) right by ``shifts[b]`` along L, wrapping around.

    The same move as mlx-lm's dynamic roll (over the whole L axis, so unused columns at
    the end wrap to the front, where the mask hides them). E.g. one row ``[a b c _]``
    rolled by 1 is ``[_ a b c]``.
    """
    n = x.shape[2]
    if n == 0 or not np.any(shifts % n):
        return x
    idx = (np.arange(n)[None, :] - np.asarray(shifts)[:, None]) % n
    return mx.take_along_axis(x, mx.array(idx, dtype=mx.int32)[:, None, :, None], axis=2)


def pad_columns(x: mx.array, left: int, right: int) -> mx.array:
    """Zero columns on both sides of L; a negative ``right`` cuts unused tail columns."""
    if right < 0:
        x, right = x[..., :right, :], 0
    if left or right:
        x = mx.pad(x, [(0, 0), (0, 0), (left, right), (0, 0)])
    return x


def as_rows(indices) -> list[int]:
    return indices.tolist() if isinstance(indices, mx.array) else [int(i) for i in indices]


class LeftPaddedKV:
    """Keys and values (B, H, L, D) with rows left-padded to a shared write column:
    the code BatchKV and BatchRing share. Subclasses name their extra ``state`` fields
    and define their own ``offset``/``left_padding`` attributes (a seeded bug patches
    them per class)."""

    step = STEP
    STATE_FIELDS = ("keys", "values", "offset", "left_padding")

    def __init__(self, left_padding: Sequence[int]):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        name = type(self).__name__
        self.offset_ints = RowInts(f"{name}.offset")
        self.left_padding_ints = RowInts(f"{name}.left_padding")
        self.left_padding = left_padding
        self.offset = -self.left_padding_host
        self._idx = 0
        self._decode_masks = DecodeMasks()

    @property
    def state(self):
        return tuple(getattr(self, name) for name in self.STATE_FIELDS)

    @state.setter
    def state(self, v) -> None:  # not gated: protocol
        for name, value in zip(self.STATE_FIELDS, v, strict=True):
            setattr(self, name, value)

    @property
    def nbytes(self) -> int:  # not gated: protocol
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def token_bytes(self) -> int:
        """Bytes one token of one row holds here, as stored (packed, when quantized); 0
        before the first write (a layer that reads another layer's keys never writes)."""
        if self.keys is None:  # one way: has keys
            return 0
        return (self.keys.nbytes + self.values.nbytes) // (self.keys.shape[0]
                                                           * self.keys.shape[2])

    @staticmethod
    def drops_all_true_decode_mask() -> bool:
        """True on the CPU backend. It has no fused attention: SDPA applies a bool mask
        as ``where(mask, scores, min)``, which an all-True mask leaves equal to the bit,
        at the cost of a broadcast and a select per layer. On a GPU a mask array selects
        other kernels (other bits), so l1 keeps it there, as BatchGenerator passes it."""
        return mx.default_device().type == mx.cpu

    @classmethod
    def _merged(cls, sizes: list[int], newest, make):
        """The cache ``merge`` builds: row i's newest ``sizes[i]`` keys and values
        (``newest(i, s)`` gives them, (1, H, s, D) each) left-padded to the longest.
        ``make(pads)`` builds the empty cache. None when every row is empty."""
        width = max(sizes)
        if width == 0:
            return None
        rows = [newest(i, s) for i, s in enumerate(sizes) if s > 0]
        H = max(k.shape[1] for k, _ in rows)
        Dk = max(k.shape[3] for k, _ in rows)
        Dv = max(v.shape[3] for _, v in rows)
        dtype = rows[0][0].dtype
        pads = [width - s for s in sizes]
        keys = mx.zeros((len(sizes), H, width, Dk), dtype)
        values = mx.zeros((len(sizes), H, width, Dv), dtype)
        placed = iter(rows)
        for i, (p, s) in enumerate(zip(pads, sizes)):
            if s > 0:
                k, v = next(placed)
                keys[i : i + 1, :, p : p + s] = k
                values[i : i + 1, :, p : p + s] = v
        cache = make(pads)
        cache.keys, cache.values = keys, values
        return cache


class BatchKV(LeftPaddedKV):
    """Full-attention batch KV cache (mlx-lm's ``BatchKVCache`` layout, own code)."""

    offset = RowIntsAttribute()
    left_padding = RowIntsAttribute()
    STATE_FIELDS = (*LeftPaddedKV.STATE_FIELDS, "_idx")

    def __init__(self, left_padding: Sequence[int]):
        super().__init__(left_padding)
        self._right_padding: np.ndarray | None = None  # set by prepare, rolled by finalize

    # -- the protocol the models speak ----------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev, n = self._idx, keys.shape[2]
        if self.keys is None or prev + n > self.keys.shape[2]:
            self._grow(keys, values)
        self.offset_ints.shift(n)
        self._idx += n
        self.keys[..., prev : self._idx, :] = keys
        self.values[..., prev : self._idx, :] = values
        return self.keys_and_values()

    def room_for_one(self) -> None:
        """Grow as ``update_and_fetch`` would before one more column, for a step that
        writes the column itself (the compiled path, fast's one-kernel step)."""
        if self._idx + 1 > self.keys.shape[2]:  # full
            self._grow(self.keys[..., :1, :], self.values[..., :1, :])

    def wrote_one(self) -> None:
        """Count the column such a step wrote, as ``update_and_fetch`` would."""
        self._idx += 1
        self.offset_ints.shift(1)

    def _grow(self, keys: mx.array, values: mx.array) -> None:
        """Add ceil(n / 256) * 256 zero columns; a partly used tail is cut first."""
        B, H, n, _ = keys.shape
        cols = (n + self.step - 1) // self.step * self.step
        new_k = mx.zeros((B, H, cols, keys.shape[3]), keys.dtype)
        new_v = mx.zeros((B, H, cols, values.shape[3]), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
            return
        if self._idx % self.step:
            self.keys = self.keys[..., : self._idx, :]
            self.values = self.values[..., : self._idx, :]
        self.keys = mx.concatenate([self.keys, new_k], axis=2)
        self.values = mx.concatenate([self.values, new_v], axis=2)

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        return self.keys[..., : self._idx, :], self.values[..., : self._idx, :]

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        """An array, (B, 1, N, _idx + N), as mlx-lm's, even at N = 1. The one exception:
        at N = 1 with no padded row the mask is all True, and it is dropped where that
        cannot change a bit (``drops_all_true_decode_mask``)."""
        if N == 1 and window_size is None:
            if (not return_array and self.drops_all_true_decode_mask()
                    and not self.left_padding_ints.any_nonzero()):
                return None
            return self._decode_masks(self._idx, self.left_padding_host)
        return causal_mask(N, self._idx, left_padding=self.left_padding_host, window=window_size)

    # -- prefill of right-padded prompts ----------------------------------------------

    def prepare(self, *, lengths=None, right_padding=None) -> None:
        """``right_padding`` (with the prompts right-padded to one length) is moved to the
        left by ``finalize``. No ``left_padding``: a batch is built padded (module doc)."""
        if right_padding is not None and max(right_padding) > 0:  # one way: padded prefill
            self._right_padding = host_ints(right_padding)

    def finalize(self) -> None:
        """Right-justify right-padded rows. Prompts [5, 6] and [7] prefilled as
        ``[5 6] [7 _]`` become ``[5 6] [_ 7]``: left_padding [0, 1], offset [2, 1]."""
        if self._right_padding is None:  # not gated: unprepared
            return
        pad = self._right_padding
        if self.keys is not None:  # one way: has keys
            self.keys = roll_rows(self.keys, pad)
            self.values = roll_rows(self.values, pad)
        self.offset = self.offset_host - pad
        self.left_padding = self.left_padding_host + pad
        self._right_padding = None

    # -- dynamic B ---------------------------------------------------------------------

    def filter(self, indices) -> None:
        """Keep rows ``indices`` (in that order), then drop the columns every kept row
        pads: left_padding [3, 1, 2] filtered to rows [0, 2] trims 2 -> [1, 0]."""
        rows = take_rows(self, indices)
        if self._right_padding is not None:  # not gated: mid-prefill
            self._right_padding = self._right_padding[rows]
        trim = int(self.left_padding_host.min()) if rows else 0
        if trim > 0:
            if self.keys is not None:  # one way: has keys
                self.keys = self.keys[..., trim:, :]
                self.values = self.values[..., trim:, :]
            self._idx -= trim  # mlx-lm does this even with no keys: _idx can go negative
            self.left_padding = self.left_padding_host - trim

    def extend(self, other: BatchKV) -> None:
        """Append ``other``'s rows. Both sides are padded so their write columns line up
        at ``max(_idx)`` and their widths at ``max(L)``: _idx 3 and 5 -> the first side
        gets 2 more left-padding columns."""
        if self._right_padding is not None or other._right_padding is not None:  # not gated: misuse
            raise ValueError("finalize() both caches before extend()")
        extend_aligned(self, other)

    def extract(self, idx: int) -> KVCache:
        """Row ``idx`` as mlx-lm's single-row ``KVCache`` (padding dropped)."""
        pad = int(self.left_padding_host[idx])
        return kv_row(
            self.keys[idx : idx + 1, :, pad : self._idx],
            self.values[idx : idx + 1, :, pad : self._idx],
        )

    @classmethod
    def merge(cls, caches: Sequence[KVCache]) -> BatchKV:
        """Left-pad single-row caches to the longest: sizes [2, 4] -> left_padding [2, 0],
        keys exactly 4 columns wide, _idx 4."""
        sizes = [c.size() for c in caches]
        cache = cls._merged(sizes, lambda i, s: (caches[i].keys[..., :s, :],
                                                 caches[i].values[..., :s, :]), cls)
        if cache is None:
            return cls([0] * len(caches))
        cache.offset = cache.offset_host + max(sizes)
        cache._idx = max(sizes)
        return cache


def take_rows(cache, indices) -> list[int]:
    """The row half of ``filter`` (BatchKV and BatchRing): keep rows ``indices`` of the
    keys, values and per-row ints, in that order. Returns the rows as a list."""
    rows = as_rows(indices)
    if cache.keys is not None:
        take = mx.array(rows, dtype=mx.int32)
        cache.keys, cache.values = cache.keys[take], cache.values[take]
    cache.offset = cache.offset_host[rows]
    cache.left_padding = cache.left_padding_host[rows]
    return rows


def extend_aligned(cache, other) -> None:
    """The body of ``extend`` (BatchKV and BatchRing): append ``other``'s rows, both
    sides padded so their write columns line up at ``max(_idx)`` and their widths at
    ``max(L)``. With no keys on either side only the per-row ints are joined."""
    if cache.keys is None and other.keys is None:  # not gated: empty extend
        cache.left_padding = np.concatenate([cache.left_padding_host, other.left_padding_host])
        cache.offset = np.concatenate([cache.offset_host, other.offset_host])
        return
    ref = cache if cache.keys is not None else other
    idx = max(cache._idx, other._idx)
    width = max(c.keys.shape[2] for c in (cache, other) if c.keys is not None)
    parts = [pad_for_extend(c, ref, idx, width) for c in (cache, other)]
    cache.keys = mx.concatenate([p[0] for p in parts])
    cache.values = mx.concatenate([p[1] for p in parts])
    cache.left_padding = np.concatenate([p[2] for p in parts])
    cache.offset = np.concatenate([cache.offset_host, other.offset_host])
    cache._idx = idx


def pad_for_extend(c, ref, idx: int, width: int):
    """For ``extend`` (BatchKV and BatchRing): ``c``'s keys, values and left padding
    shifted right to write column ``idx`` and padded to ``width`` columns (``ref``
    supplies shapes when ``c`` has no keys yet)."""
    k, v = c.keys, c.values
    if k is None:
        B = len(c.offset_host)
        k = mx.zeros((B, ref.keys.shape[1], 0, ref.keys.shape[3]), ref.keys.dtype)
        v = mx.zeros((B, ref.values.shape[1], 0, ref.values.shape[3]), ref.keys.dtype)
    left = idx - c._idx
    right = width - k.shape[2] - left
    return pad_columns(k, left, right), pad_columns(v, left, right), c.left_padding_host + left

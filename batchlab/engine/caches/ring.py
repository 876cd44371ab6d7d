"""BatchRing: the sliding-window (rotating) KV cache of a batch.

A reproduction of mlx-lm 0.32's ``BatchRotatingKVCache`` layout, own code. Two regimes:

- Prefill (N > 1 keys): keys are kept in temporal order and concatenated; before each
  chunk the cache is cut to its newest ``max_size - 1`` columns, so a chunk of S keys
  leaves up to ``max_size + S - 1`` (every new key still sees ``max_size`` keys).
- Decode (1 key): the buffer grows to ``max_size`` columns, then becomes a ring with one
  pointer ``_idx`` SHARED by all rows; each write evicts the oldest column of every row
  and lowers every ``left_padding`` by one, so it goes negative once a row's padding has
  been overwritten. Worked example, max_size 4, row 0 prefilled with ``a b``, row 1 with
  nothing (two columns of right padding, rolled to the left by ``finalize``)::

      prefill + decode c / x:    [a b c _] [_ _ x _]  _idx 3  left_padding [0, 2]
      decode d / y (fills):      [a b c d] [_ _ x y]  _idx 4  left_padding [0, 2]
      decode e / z (wraps):      [e b c d] [z _ x y]  _idx 1  left_padding [-1, 1]

  ``left_padding`` counts in temporal order (oldest first, i.e. the ring rolled left by
  ``_idx``); the decode mask is built that way and rolled into ring order.

``_offset`` counts every column ever written (padding included); ``offset`` is each
row's RoPE position. The per-row ints live on the host (``RowInts``).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import RotatingKVCache

from batchlab.engine.caches.kv import LeftPaddedKV, extend_aligned, roll_rows, take_rows
from batchlab.engine.caches.mask import ring_mask
from batchlab.engine.caches.rowints import RowIntsAttribute, host_ints
from batchlab.engine.caches.single import ring_row, ring_temporal


class BatchRing(LeftPaddedKV):
    """Sliding-window batch KV cache of ``max_size`` columns (keep = 0)."""

    offset = RowIntsAttribute()
    left_padding = RowIntsAttribute()
    STATE_FIELDS = (*LeftPaddedKV.STATE_FIELDS, "max_size", "_offset", "_idx", "rotated")

    def __init__(self, max_size: int, left_padding: Sequence[int]):
        super().__init__(left_padding)  # _idx: ring pointer (decode) or columns (prefill)
        self.max_size = max_size
        self._offset = 0  # columns ever written, padding included
        self.rotated = False
        # absolute lengths of right-padded prompts, so padding never evicts real keys
        self._lengths: np.ndarray | None = None

    def columns_held(self) -> int:
        """The columns every row holds: the window once the ring has rotated, else the
        columns written. A row that leaves does not narrow it (``filter`` keeps shared
        padding, as mlx-lm's does), so a ring can be wider than its longest live row:
        what serve's row cost must count (``engine/core/cost.py``). An empty ring: 0."""
        return self.max_size if self.rotated else self._idx

    # -- the protocol the models speak ----------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if keys.shape[2] == 1:
            return self._write_one(keys, values)
        return self._append(keys, values)

    def _append(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Prefill: temporal order, newest ``max_size - 1`` columns, then the chunk."""
        n = keys.shape[2]
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self._temporal_order()
            self.keys = self.keys[..., : self._idx, :]
            self.values = self.values[..., : self._idx, :]
            if self._lengths is not None:
                self._roll_padding_left()
            trim = self._idx - self.max_size + 1
            if trim > 0:
                self.left_padding = self.left_padding_host - trim
                self.keys = self.keys[..., trim:, :]
                self.values = self.values[..., trim:, :]
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset_ints.shift(n)
        self._offset += n
        self._idx = self.keys.shape[2]
        return self.keys, self.values

    def _write_one(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Decode: grow to ``max_size``, cut an over-long prefill, then write in the ring."""
        if self._lengths is not None:  # not gated: misuse
            raise RuntimeError("finalize() should be called before decoding with BatchRing")
        prev = self._offset
        if self.keys is None or (prev >= self.keys.shape[2] and self.keys.shape[2] < self.max_size):
            self._grow(keys, values, min(self.step, self.max_size - prev))
            self._idx = prev
        trim = self.keys.shape[2] - self.max_size
        if trim > 0:  # the prefill left max_size + S - 1 columns: keep the newest
            self.keys = self.keys[..., trim:, :]
            self.values = self.values[..., trim:, :]
            self._idx = self.max_size
            self.left_padding = self.left_padding_host - trim
        if self._idx == self.max_size:
            self.rotated, self._idx = True, 0
        if self.rotated:  # this write evicts every row's oldest column
            self.left_padding_ints.shift(-1)
        self.keys[..., self._idx : self._idx + 1, :] = keys
        self.values[..., self._idx : self._idx + 1, :] = values
        self._offset += 1
        self.offset_ints.shift(1)
        self._idx += 1
        return self.keys_and_values()

    def _grow(self, keys: mx.array, values: mx.array, cols: int) -> None:
        B, H, _, _ = keys.shape
        new_k = mx.zeros((B, H, cols, keys.shape[3]), keys.dtype)
        new_v = mx.zeros((B, H, cols, values.shape[3]), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
        else:
            self.keys = mx.concatenate([self.keys, new_k], axis=2)
            self.values = mx.concatenate([self.values, new_v], axis=2)

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        if self._offset < self.keys.shape[2]:
            return self.keys[..., : self._offset, :], self.values[..., : self._offset, :]
        return self.keys, self.values

    def make_mask(self, N: int, window_size: int | None = None, return_array: bool = False):
        """An array (B, 1, N, min(max_size-1, _offset)+N), as mlx-lm's (``mask.ring_mask``),
        except a decode mask that hides nothing, dropped where that cannot change a bit
        (``LeftPaddedKV.drops_all_true_decode_mask``: the CPU backend)."""
        return ring_mask(
            N,
            max_size=self.max_size,
            seen=self._offset,
            idx=self._idx,
            rotated=self.rotated,
            left_padding=self.left_padding_host,
            window=window_size,
            all_true_as_none=not return_array and self.drops_all_true_decode_mask(),
            left_padding_max=self.left_padding_ints.bounds()[1],
            decode_masks=self._decode_masks,
        )

    def to_quantized(self, group_size: int = 64, bits: int = 4):  # not gated: protocol
        raise NotImplementedError("BatchRing has no quantized form (nor has mlx-lm's)")

    # -- ring order ----------------------------------------------------------------

    def _temporal_order(self) -> None:
        """Unroll a wrapped ring so the oldest column comes first; _idx = its width."""
        if self.rotated:
            self.keys = mx.roll(self.keys, -self._idx, axis=2)
            self.values = mx.roll(self.values, -self._idx, axis=2)
            self._idx = self.keys.shape[2]
            self.rotated = False

    def _roll_padding_left(self) -> None:
        """Rows whose prompt ended (offset past their length) hold right padding: roll
        it to the left so the trim cuts padding, not keys."""
        roll = np.maximum(0, self.offset_host - self._lengths)
        self.keys = roll_rows(self.keys, roll)
        self.values = roll_rows(self.values, roll)
        self.left_padding = self.left_padding_host + roll
        self.offset = self.offset_host - roll

    # -- prefill of right-padded prompts ----------------------------------------------

    def prepare(self, *, lengths=None, right_padding=None) -> None:
        """No ``left_padding``, no ``trim``/``size``: as BatchKV (kv.py's module doc)."""
        if right_padding is not None and max(right_padding) > 0:  # one way: padded prefill
            self._lengths = host_ints(lengths) + self.offset_host

    def finalize(self) -> None:
        """Right-justify right-padded rows (see ``BatchKV.finalize``)."""
        if self._lengths is not None and self.keys is not None:  # one way: prepared
            self._roll_padding_left()
        self._lengths = None

    # -- dynamic B ---------------------------------------------------------------------

    def filter(self, indices) -> None:
        """Keep rows ``indices``. Unlike BatchKV, shared padding is NOT trimmed (mlx-lm)."""
        rows = take_rows(self, indices)
        if self._lengths is not None:  # not gated: mid-prefill
            self._lengths = self._lengths[rows]

    def extend(self, other: BatchRing) -> None:
        """Append ``other``'s rows. Rings at different pointers (or one wrapped, one
        not) are first put in temporal order; then both are padded so their write
        columns line up at ``max(_idx)`` and their widths at ``max(L)``."""
        if self._lengths is not None or other._lengths is not None:  # not gated: misuse
            raise ValueError("finalize() both caches before extend()")
        if self.keys is None and other.keys is None:  # not gated: empty extend
            extend_aligned(self, other)  # only the per-row ints: _offset stays (mlx-lm)
            return
        if self.rotated != other.rotated or self._idx != other._idx:
            self._temporal_order()
            other._temporal_order()
        extend_aligned(self, other)
        self._offset = max(self._offset, other._offset)

    def extract(self, idx: int) -> RotatingKVCache:
        """Row ``idx`` as mlx-lm's ``RotatingKVCache``, in temporal order, padding cut."""
        pad = max(0, int(self.left_padding_host[idx]))
        keys, values, end = self.keys[idx : idx + 1], self.values[idx : idx + 1], self._idx
        if self.rotated:
            keys, values = mx.roll(keys, -self._idx, axis=2), mx.roll(values, -self._idx, axis=2)
            end = self.max_size
        offset = int(self.offset_host[idx])
        return ring_row(self.max_size, keys[:, :, pad:end], values[:, :, pad:end], offset)

    @classmethod
    def merge(cls, caches: Sequence[RotatingKVCache]) -> BatchRing:
        """Left-pad each row's newest ``size()`` keys to the longest; ``offset`` keeps
        each row's own RoPE position (not ``size - padding``)."""
        max_size = caches[0].max_size
        if any(c.max_size != max_size for c in caches):  # not gated: misuse
            raise ValueError("BatchRing can only merge caches with the same max_size")
        sizes = [c.size() for c in caches]
        cache = cls._merged(
            sizes,
            lambda i, s: (ring_temporal(caches[i], caches[i].keys)[..., -s:, :],
                          ring_temporal(caches[i], caches[i].values)[..., -s:, :]),
            lambda pads: cls(max_size, pads))
        if cache is None:
            return cls(max_size, [0] * len(caches))
        cache.offset = [c.offset for c in caches]
        cache._idx = cache._offset = max(sizes)
        return cache

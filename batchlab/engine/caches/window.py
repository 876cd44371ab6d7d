"""WindowKV: a sliding-window batch KV cache with no ring, for the ``invariant`` path.

l1's ``BatchRing`` writes every row at one ring pointer shared by the batch, so a row's
keys sit in the ring in an order that depends on when the batch started and on its
neighbours (FACTS.md): the same row alone has its keys rotated differently, and the
attention sum runs in another order. Here every row keeps its keys in temporal order,
right-justified at one write column (``BatchKV``'s layout), and attention reads only the
newest columns a window can see::

    max_size 4, rows A (6 keys) and B (2 keys), after B's 2nd decode step:
    col:     0  1  2  3  4  5        _idx 6, view = columns 3..5 (max_size - 1 old
    row A:   a0 a1 a2 a3 a4 a5       keys) + the column the next key is written to
    row B:   .  .  .  .  b0 b1       left_padding [0, 4] -> masks A: T T T T, B: F T T T

So a row's attention always sees its own window's keys, oldest first, with masked keys
(other rows' padding) only in front of them: the same keys in the same order as when
it runs alone. Columns no window can see are cut when the buffer grows, so the buffer
stays within ``max_size + 32`` columns; ``left_padding`` may then go negative (the
row's padding was cut with them), which the mask reads as "no padding in view".

The window semantics are RotatingKVCache's: a decode query sees the newest
``max_size`` keys (itself included); a prefill chunk of N keys sees up to
``max_size - 1`` older keys, masked causally with ``window_size`` (default max_size).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.cache import RotatingKVCache

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.mask import causal_mask_host
from batchlab.engine.caches.single import ring_row


class WindowKV(BatchKV):
    """BatchKV whose attention reads only the newest ``max_size - 1`` columns plus the
    new keys (see the module docstring)."""

    STATE_FIELDS = (*BatchKV.STATE_FIELDS, "max_size")
    # Grow (and cut) in steps of 32 columns, not 256: the buffer stays near the window,
    # and the cut runs in the gate's cells (a 52-id prompt and 12 steps pass 32 columns).
    step = 32

    def __init__(self, max_size: int, left_padding: Sequence[int]):
        super().__init__(left_padding)
        self.max_size = max_size
        self.served_start = 0

    def view_start(self) -> int:
        """The first column the next forward's queries can see (before it writes)."""
        return max(0, self._idx - (self.max_size - 1))

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None and self._idx + keys.shape[2] > self.keys.shape[2]:
            self._cut_unread()  # before BatchKV reads _idx: the write column moves with it
        start = self.view_start()
        super().update_and_fetch(keys, values)
        self.served_start = start
        return self.keys[..., start : self._idx, :], self.values[..., start : self._idx, :]

    def first_keys(self) -> mx.array:
        """Each row's first valid column in the view the last write returned."""
        return mx.maximum(self.left_padding - self.served_start, 0)

    def _cut_unread(self) -> None:
        """Drop the columns no window will read again (the buffer is about to grow).
        The mask reads padding relative to ``view_start``, so it does not change."""
        cut = self.view_start()
        if cut > 0:
            self.keys = self.keys[..., cut:, :]
            self.values = self.values[..., cut:, :]
            self._idx -= cut
            self.left_padding = self.left_padding_host - cut

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        """(B, 1, N, view width) over the view ``update_and_fetch`` will return; at a
        decode step that hides nothing, ``None`` where that cannot change a bit (the
        CPU backend: ``drops_all_true_decode_mask``)."""
        start = self.view_start()
        padding = self.left_padding_host - start
        window = window_size or self.max_size
        width = self._idx - start + N
        if (N == 1 and not return_array and self.drops_all_true_decode_mask() and width <= window
                and (len(padding) == 0 or int(padding.max()) <= 0)):
            return None
        return mx.array(causal_mask_host(N, self._idx - start, left_padding=padding,
                                         window=window))

    def to_quantized(self, group_size: int = 64, bits: int = 4):  # not gated: protocol
        raise NotImplementedError("WindowKV has no quantized form")

    def extract(self, idx: int) -> RotatingKVCache:  # not gated: kv history
        """Row ``idx`` as mlx-lm's ``RotatingKVCache``: its newest keys (at most
        ``max_size``), in temporal order."""
        first = max(int(self.left_padding_host[idx]), self._idx - self.max_size, 0)
        keys = self.keys[idx : idx + 1, :, first : self._idx]
        values = self.values[idx : idx + 1, :, first : self._idx]
        return ring_row(self.max_size, keys, values, int(self.offset_host[idx]))

    @classmethod
    def merge(cls, caches):  # not gated: refusal
        raise ValueError("the invariant path does not take rows with history yet "
                         "(WindowKV has no merge); run them on the l1 path")

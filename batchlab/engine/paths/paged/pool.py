"""One layer's KV pool: the block manager's bookkeeping and the arrays it indexes.

Keys and values are stored flat, ``(capacity * block_size, H, D)``: pool row ``s`` is slot
``s % block_size`` of block ``s // block_size``. A write scatters a forward's new keys to
their slots; a read gathers each row's slots into the left-padded ``(B, H, L, D)`` layout
attention expects, reading the zero block where a row has no token (its left padding).
The arrays are made at the first write (the model's H, D and dtype) and grow with the
manager's capacity.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from batchlab.engine.paths.paged.block_manager import BlockManager


class LayerPool:
    def __init__(self, manager: BlockManager):
        self.manager = manager
        self.keys: mx.array | None = None
        self.values: mx.array | None = None

    @property
    def block_size(self) -> int:
        return self.manager.block_size

    def _fit(self, keys: mx.array, values: mx.array) -> None:
        """Make or grow the arrays to the manager's capacity (new rows are zero)."""
        rows = self.manager.capacity * self.block_size
        have = 0 if self.keys is None else self.keys.shape[0]
        if have >= rows:
            return
        H, Dk, Dv = keys.shape[1], keys.shape[3], values.shape[3]
        new_k = mx.zeros((rows - have, H, Dk), keys.dtype)
        new_v = mx.zeros((rows - have, H, Dv), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
        else:
            self.keys = mx.concatenate([self.keys, new_k])
            self.values = mx.concatenate([self.values, new_v])

    def write(self, slots: list[int], keys: mx.array, values: mx.array) -> None:
        """``keys`` (B, H, n, D): row b's token t goes to ``slots[b * n + t]``."""
        self._fit(keys, values)
        B, H, n, _ = keys.shape
        idx = mx.array(slots, dtype=mx.int32)
        self.keys[idx] = keys.transpose(0, 2, 1, 3).reshape(B * n, H, keys.shape[3])
        self.values[idx] = values.transpose(0, 2, 1, 3).reshape(B * n, H, values.shape[3])

    def gather(self, index: np.ndarray) -> tuple[mx.array, mx.array]:
        """``index`` (B, L) pool rows (zero-block rows for padding) -> keys and values
        (B, H, L, D), contiguous."""
        idx = mx.array(index, dtype=mx.int32)
        keys = mx.contiguous(self.keys[idx].transpose(0, 2, 1, 3))
        values = mx.contiguous(self.values[idx].transpose(0, 2, 1, 3))
        return keys, values

    @property
    def nbytes(self) -> int:
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def token_bytes(self) -> int:
        if self.keys is None:  # one way: has keys
            return 0
        return (self.keys.nbytes + self.values.nbytes) // self.keys.shape[0]

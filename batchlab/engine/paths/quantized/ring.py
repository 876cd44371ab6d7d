"""BatchQuantizedRing: the sliding-window batch cache (``BatchRing``) in the packed
quantized layout of ``quantized_kv.py``, switched on at the quantized-KV start.

Every ring move (prefill trim, growth to ``max_size``, the shared pointer's wrap, the
temporal unroll before ``extend``) is BatchRing's own code on the packed uint32 array:
a column of the ring is one key, packed, so layout and masks are unchanged.

mlx-lm has no quantized ring (``RotatingKVCache.to_quantized`` raises "NYI"), so there
is no mlx-lm single-row form: ``extract`` returns a ``QuantizedRingRow`` of ours, which
``merge`` takes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.single import ring_temporal
from batchlab.engine.paths.quantized.kv import KVQuant, QuantizedMode, dims_of, pack


@dataclass(slots=True, kw_only=True)
class QuantizedRingRow:
    """One row of a quantized ring: packed keys and values (1, H, n, words) in temporal
    order (oldest first), its RoPE ``offset`` and the ring's ``max_size``."""

    max_size: int
    keys: mx.array | None
    values: mx.array | None
    offset: int
    quant: KVQuant
    dims: tuple[int, int, str] | None

    def size(self) -> int:  # not gated: kv history
        return 0 if self.keys is None else min(self.keys.shape[2], self.max_size)


class BatchQuantizedRing(QuantizedMode, BatchRing):
    """Sliding-window batch cache of ``max_size`` columns, quantized from the start on."""

    def __init__(self, max_size: int, left_padding: Sequence[int], quant: KVQuant):
        super().__init__(max_size, left_padding)
        self._init_quant(quant)

    def extract(self, idx: int):
        """Row ``idx``: mlx-lm's ``RotatingKVCache`` before the switch, else a
        ``QuantizedRingRow`` (packed, temporal order, padding cut)."""
        row = super().extract(idx)
        if not self.quantized:  # not gated: kv history
            return row
        return QuantizedRingRow(max_size=self.max_size, keys=row.keys, values=row.values,
                                offset=row.offset, quant=self.quant, dims=self._dims)

    @classmethod
    def merge_quantized(
            cls, rows: Sequence, quant: KVQuant) -> BatchQuantizedRing:
        """Left-pad rows (``QuantizedRingRow`` or mlx-lm ``RotatingKVCache``, quantized
        here) to the longest, keeping each row's own RoPE offset (``BatchRing.merge``)."""
        max_size = rows[0].max_size
        if any(r.max_size != max_size for r in rows):  # not gated: misuse
            raise ValueError("BatchQuantizedRing can only merge rows with the same max_size")
        packed = [_temporal_packed(r, quant) for r in rows]
        sizes = [0 if p is None else min(p[0].shape[2], max_size) for p in packed]
        cache = cls._merged(sizes, lambda i, s: (packed[i][0][..., -s:, :],
                                                 packed[i][1][..., -s:, :]),
                            lambda pads: cls(max_size, pads, quant))
        if cache is None:  # not gated: empty merge
            return cls(max_size, [0] * len(rows), quant)
        cache.offset = [r.offset for r in rows]
        cache._idx = cache._offset = max(sizes)
        cache.quantized = True
        cache._dims = next(_dims_of(r) for r in rows if r.keys is not None)
        return cache


def _dims_of(r) -> tuple[int, int, str]:
    if isinstance(r, QuantizedRingRow):
        return r.dims
    return dims_of(r.keys, r.values)


def _temporal_packed(r, quant: KVQuant):
    if r.keys is None:  # not gated: kv history
        return None
    if isinstance(r, QuantizedRingRow):
        if r.quant != quant:  # not gated: input
            raise ValueError(f"a ring row quantized as {r.quant} cannot join a batch at {quant}")
        return r.keys, r.values
    keys, values = ring_temporal(r, r.keys), ring_temporal(r, r.values)
    return pack(keys, quant), pack(values, quant)

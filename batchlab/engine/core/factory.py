"""The one place a path says which batch caches its rows get.

A scheduler asks its ``caches`` (a ``BatchCaches`` or a path's own subclass) for

    fresh(model, n)          empty caches for n admitted rows (left padding zero)
    merged(model, per_row)   one batch from each row's single-row caches (rows that
                             bring history: a prefix, a parked or a finished row)

so a new path brings its caches here, not through hooks spread over the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mlx import nn

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.core import layers


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCaches:
    """l1's caches: ``kv_class`` for full attention, ``ring_class`` for sliding windows
    (``ring_class(max_size, left_padding)``), BatchState / BatchList as the model needs."""

    kv_class: type = BatchKV
    ring_class: type = BatchRing

    def fresh(self, model: nn.Module, n: int) -> list:
        return layers.make_batch_caches(model, n, kv_class=self.kv_class,
                                        ring_class=self.ring_class)

    def merged(self, model: nn.Module, per_row: Sequence[Sequence]) -> list:
        """As BatchGenerator merges whatever each row came with (left-padded to the
        longest); a row with no history brings fresh single-row caches."""
        layers.refuse_unbatchable(model)
        return layers.merge_layers(per_row, kv_class=self.kv_class)

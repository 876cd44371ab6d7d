"""What a row costs in KV bytes on a path, measured on the path's own caches.

One row of the path's batch caches (``caches.fresh(model, 1)``) takes a two-token
prefill and a decode step (a quantized path switches format after its first forward; a
ring keeps its decode buffer); then each cache says what it holds per token
(``token_bytes``: full attention and sliding windows, the latter never past the window)
or per row (``row_bytes``: SSM and conv state, whatever the length). A layer that reads
another layer's keys (shared KV) holds none and costs nothing.

The engine's batch caches are left-padded to the longest row, so a batch costs
``rows x (longest row)``, not the sum of its rows: ``batch_bytes``. Its ring layers can
hold more: a batch ring keeps the width of rows that left (``BatchRing.columns_held``),
so ``batch_bytes`` takes the batch's ``ring_width`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core.layers import leaves


@dataclass(frozen=True, slots=True, kw_only=True)
class RowCost:
    per_token: int  # bytes per token, full-attention layers
    window_per_token: tuple[tuple[int, int], ...]  # (window, bytes per token) per ring layer
    fixed: int  # bytes per row whatever its length (state layers)
    block_size: int | None = None  # paged caches: a row holds whole blocks, unpadded

    def row_bytes(self, tokens: int, ring_width: int = 0) -> int:
        """A row of ``tokens`` whose ring layers hold at least ``ring_width`` columns."""
        return self.fixed + self.per_token * tokens + self.ring_bytes(max(tokens, ring_width))

    def ring_bytes(self, tokens: int) -> int:
        """A row's sliding-window layers: never more than the window."""
        return sum(min(window, tokens) * cost for window, cost in self.window_per_token)

    def batch_bytes(self, lengths: list[int], ring_width: int = 0) -> int:
        """The KV bytes of a batch whose rows reach ``lengths`` tokens: left-padded to
        the longest, or, paged, each row's full-attention keys in its own whole blocks
        (shared prefix blocks counted once per row: an upper bound) while its ring layers
        stay left-padded to the longest (a paged batch keeps its rings as l1 does; the
        matrix's row-cost cells caught the per-row count undercounting them). The ring
        layers hold at least ``ring_width`` columns a row (``ring_width(caches)``: a
        batch ring does not narrow when its longest row leaves)."""
        if not lengths:
            return 0
        bs, longest = self.block_size, max(lengths)
        if bs:
            ring = self.ring_bytes(max(longest, ring_width))
            return sum(self.fixed + self.per_token * (n + -n % bs) + ring for n in lengths)
        return len(lengths) * self.row_bytes(longest, ring_width)


def ring_width(caches: list) -> int:
    """The columns a row holds in the widest ring layer of a batch's caches (0 without
    one): ``batch_bytes``'s ``ring_width`` for the batch as it stands."""
    return max((c.columns_held() for c in leaves(caches) if hasattr(c, "columns_held")),
               default=0)


def measure_row_cost(model: nn.Module, caches_factory) -> RowCost:
    """``caches_factory``: a scheduler's ``caches`` (``core/factory.py``)."""
    caches = caches_factory.fresh(model, 1)
    mx.eval(model(mx.array([[0, 0]]), cache=caches))
    mx.eval(model(mx.array([[0]]), cache=caches))
    per_token, rings, fixed = 0, [], 0
    for cache in leaves(caches):
        cost = cache.token_bytes()
        if cost is None:
            fixed += cache.row_bytes()
        elif hasattr(cache, "max_size"):
            rings.append((cache.max_size, cost))
        else:
            per_token += cost
    return RowCost(per_token=per_token, window_per_token=tuple(rings), fixed=fixed,
                   block_size=getattr(caches_factory, "block_size", None))

"""Seeded bugs in the row-cost accounting that ``serve --kv-budget`` admits rows by
(``batchlab/engine/core/cost.py``): no trajectory shows them, the ``row-cost`` cells'
check does (``batchlab/subjects/row_cost.py``: the projection of the live rows against
the bytes their caches hold, after every step). Each lets serve overcommit memory."""

from __future__ import annotations

from batchlab.engine.caches.state import BatchState
from batchlab.engine.core.cost import RowCost
from batchlab.selftest.inject import Patch


def paged_rings_per_row() -> list[Patch]:
    """On the paged path every layer of a row is costed by that row's own length, ring
    layers too (the accounting before round 4): but a paged batch keeps l1's rings,
    left-padded to the longest row, so a ragged batch of a sliding-window model holds
    more than projected (the row-cost cells found this in the engine itself)."""

    def batch_bytes(self: RowCost, lengths: list[int], ring_width: int = 0) -> int:
        if not lengths:
            return 0
        bs = self.block_size
        if bs:
            return sum(self.row_bytes(n) + self.per_token * (-n % bs) for n in lengths)
        return len(lengths) * self.row_bytes(max(lengths))

    return [Patch(owner=RowCost, name="batch_bytes", value=batch_bytes)]


def ring_width_ignored() -> list[Patch]:
    """A batch's rings sized from its live rows' lengths alone (the accounting before
    this round): a batch ring keeps the columns of rows that left (``BatchRing.filter``
    keeps shared padding, as mlx-lm's), so once the longest row leaves, a sliding-window
    model's batch holds more than projected (gemma3: 2560 bytes held, 1536 projected)."""
    measured = RowCost.batch_bytes

    def batch_bytes(self: RowCost, lengths: list[int], ring_width: int = 0) -> int:
        return measured(self, lengths)

    return [Patch(owner=RowCost, name="batch_bytes", value=batch_bytes)]


def state_costs_per_token() -> list[Patch]:
    """An SSM / conv state layer answers ``token_bytes`` with 0 like an unwritten KV
    layer, instead of None ("ask my row_bytes"): its state, as large at one token as at
    any, is costed at 0 per token, so a hybrid model's rows are projected without their
    state."""
    return [Patch(owner=BatchState, name="token_bytes", value=lambda self: 0)]


def paged_filter_leaks_blocks() -> list[Patch]:
    """A paged batch's ``filter`` (a row finished or evicted) drops the row's table
    without releasing its blocks: the pool only grows (it is sized on demand, so no
    trajectory changes), serve's pool statistics count the leaked blocks as used, and a
    fixed budget runs out. The row-cost cells' pool check counts the blocks the live
    rows' tables hold against ``BlockManager.stats`` (round 5)."""
    from batchlab.engine.paths.paged.cache import PagedKV
    from batchlab.selftest.inject import original

    clean = original(PagedKV, "filter")

    def filter(self: PagedKV, indices) -> None:
        self.manager.release = lambda table: None  # the dropped tables keep their blocks
        try:
            clean(self, indices)
        finally:
            del self.manager.release  # the instance attribute; the method shows again

    return [Patch(owner=PagedKV, name="filter", value=filter)]


def prefix_lookup_counts_queries() -> list[Patch]:
    """The prefix cache's lookup at admission (``BlockManager.cached_prefix``, which
    "counts nothing") counts each block it finds as a query: serve's ``prefix_hit_rate``
    (hits / queries) then reads low by the blocks every joining row looked up, though no
    token changes. The row-cost check counts the queries from the rows' sealed blocks
    (round 6)."""
    from batchlab.engine.paths.paged.block_manager import BlockManager
    from batchlab.selftest.inject import original

    clean = original(BlockManager, "cached_prefix")

    def cached_prefix(self: BlockManager, ids) -> int:
        n = clean(self, ids)
        self.num_queries += n // self.block_size
        return n

    return [Patch(owner=BlockManager, name="cached_prefix", value=cached_prefix)]

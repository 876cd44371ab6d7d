"""Seeded bugs found by mutation testing (docs/mutation.md): mutants that a
default-matrix cell does catch, but only a cell of one regime, which the campaign's
per-mutant budget did not reach (round 2), or only a cell added for them (round 3).
Kept here so the catch is checked on every self-test."""

from __future__ import annotations

from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.core import scheduler
from batchlab.engine.core.sampler import BatchSampler
from batchlab.engine.paths.paged.block_manager import BlockManager
from batchlab.selftest.inject import Patch, during


def queued_row_batch_sampler() -> list[Patch]:
    """A row inserted with its own sampler gets the batch's sampler class instead of the
    path's (``Scheduler.insert`` builds ``Sequence.start(request)`` without
    ``self.row_sampler``): on l1 nothing changes (its row sampler is BatchSampler), but on
    the invariant path the row then draws from the batch's random stream, not its own key,
    so its tokens at temperature > 0 depend on its neighbours."""
    return [during(scheduler.Scheduler, "insert", "row_sampler", lambda self: BatchSampler)]


def evict_keeps_index_entry() -> list[Patch]:
    """A cached prefix block handed out again is reset (its hash and ids dropped) but its
    entry in the manager's hash index stays (``BlockManager._forget`` with its test
    inverted, mutant ``_forget__mutmut_2``): once the block is rewritten with the same ids
    after another first block and sealed, a row whose prompt begins with the old prefix
    finds the stale entry, the ids check passes, and it reads keys computed in another
    context. The ids check hides every other reuse, so only a block rewritten with equal
    ids tells."""

    def forget(self: BlockManager, block) -> None:
        block.hash, block.ids = None, ()

    return [Patch(owner=BlockManager, name="_forget", value=forget)]


def empty_ring_merge_padded() -> list[Patch]:
    """A merge of rings that are all empty (a row parked while still queued, resumed
    alone) gives every row one column of left padding instead of none (``BatchRing.merge``
    with ``[1] * n``, mutant ``merge__mutmut_39``): the resumed row's prefill then masks
    its own first key. No cell merged only empty caches until park-queued."""
    clean = BatchRing.merge.__func__

    def merge(cls, caches):
        if all(c.keys is None for c in caches):
            return cls(caches[0].max_size, [1] * len(caches))
        return clean(cls, caches)

    return [Patch(owner=BatchRing, name="merge", value=classmethod(merge))]

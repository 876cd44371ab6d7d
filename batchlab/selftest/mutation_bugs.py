"""Seeded bugs found by mutation testing (docs/mutation.md, round 2): mutants that a
default-matrix cell does catch, but only a cell of one regime, which the campaign's
per-mutant budget did not reach. Kept here so the catch is checked on every self-test."""

from __future__ import annotations

from batchlab.engine.core import scheduler
from batchlab.engine.core.sampler import BatchSampler
from batchlab.selftest.inject import Patch, during


def queued_row_batch_sampler() -> list[Patch]:
    """A row inserted with its own sampler gets the batch's sampler class instead of the
    path's (``Scheduler.insert`` builds ``Sequence.start(request)`` without
    ``self.row_sampler``): on l1 nothing changes (its row sampler is BatchSampler), but on
    the invariant path the row then draws from the batch's random stream, not its own key,
    so its tokens at temperature > 0 depend on its neighbours."""
    return [during(scheduler.Scheduler, "insert", "row_sampler", lambda self: BatchSampler)]

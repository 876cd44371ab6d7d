"""Seeded bugs of the outside tester's fifth round (reports/gate/outside-tester-r5/): the
one bug of its 25 that every default cell passed and a cell could prove. It sat in the
sampler's regime of mixed rows: every cell with rows of their own beside rows on the
batch's shared sampler had at most one shared row, so drawing the shared rows together
gave the same bits there.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it). It wraps the engine's
own code, so it keeps tracking it as it changes.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core import sampler, scheduler
from batchlab.selftest.inject import Patch, original


def shared_rows_one_draw() -> list[Patch]:
    """Rows on the batch's shared sampler drawn in one (n, V) call and the rows with
    their own samplers one by one ("fewer calls"), once any row has its own. mlx-lm's
    BatchGenerator draws every row in its own call then, in batch order, so the shared
    rows' random bits and every later row's differ wherever two or more rows share the
    batch's sampler beside an own-sampler row at temperature > 0."""
    clean = original(sampler, "sample_rows")

    def sample_rows(logprobs: mx.array, samplers: list) -> mx.array:
        counts: dict[int, int] = {}
        for s in samplers:
            counts[id(s)] = counts.get(id(s), 0) + 1
        common = max(samplers, key=lambda s: counts[id(s)])  # the batch's shared one
        shared = [i for i, s in enumerate(samplers) if s is common]
        if len(shared) < 2 or len(shared) == len(samplers) or common.params.greedy:
            return clean(logprobs, samplers)
        together = common(logprobs[mx.array(shared)])
        rows: list = [None] * len(samplers)
        for k, i in enumerate(shared):
            rows[i] = together[k : k + 1]
        for i, s in enumerate(samplers):
            if rows[i] is None:
                rows[i] = s(logprobs[i : i + 1])
        return mx.concatenate(rows, axis=0)

    original(scheduler, "sample_rows")  # refuse if the scheduler stopped importing it
    return [Patch(owner=sampler, name="sample_rows", value=sample_rows),
            Patch(owner=scheduler, name="sample_rows", value=sample_rows)]

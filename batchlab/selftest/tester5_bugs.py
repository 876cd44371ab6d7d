"""Seeded bugs of the outside tester's fifth round (reports/gate/outside-tester-r5/): the
three bugs of its 30 that every default cell passed and a cell could prove, and the fourth
that no cell could prove until the quantized cells judged their on-time rows bit for bit
(``quant_start_all_rows``). Both sit where
batch ORDER meets sampling at temperature > 0: every cell with rows of their own beside
rows on the batch's shared sampler had at most one shared row, and every cell that
admitted rows into a prefilling batch, or history rows beside fresh ones, had them ready
on other steps (or greedy), so drawing the shared rows together, or putting newcomers or
history rows in front, gave the same bits.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it). They wrap the engine's
own code, so they keep tracking it as it changes.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core import sampler, scheduler
from batchlab.engine.core.batch import PromptBatch
from batchlab.engine.paths.quantized.kv import QuantizedMode
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


def admit_prepends() -> list[Patch]:
    """Rows admitted while others still prefill put in FRONT of the prompt batch ("newest
    first"), not behind them as BatchGenerator extends it. Rows that become ready on one
    step join in prompt-batch order, so their decode-batch positions swap, and at
    temperature > 0 the batch's one draw gives each position its own random bits."""
    original(scheduler.Scheduler, "_admit")  # refuse if the engine moved it

    def _admit(self) -> None:  # the engine's _admit, the last two lines swapped
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            fresh.extend(self.prompt)
        self.prompt = fresh

    return [Patch(owner=scheduler.Scheduler, name="_admit", value=_admit)]


def history_rows_first() -> list[Patch]:
    """An admission that brings prompt caches puts the rows WITH history first ("merge
    the cached rows, then append the fresh ones"), not in queue order as BatchGenerator
    merges them. Rows ready on one step then join in the wrong order, and at temperature
    > 0 the batch's one draw gives each position its own random bits."""
    original(scheduler.Scheduler, "_admit")  # refuse if the engine moved it

    def _admit(self) -> None:  # the engine's _admit, the admitted rows sorted
        n = min(self.config.prefill_batch_size - len(self.prompt),
                self.max_decoding - len(self.decode), len(self.queue))
        if n <= 0:
            return
        seqs, self.queue = self.queue[:n], self.queue[n:]
        seqs = sorted(seqs, key=lambda s: s.request.history is None)
        fresh = PromptBatch(seqs=seqs, caches=self._admitted_caches(seqs))
        if len(self.prompt):
            self.prompt.extend(fresh)
        else:
            self.prompt = fresh

    return [Patch(owner=scheduler.Scheduler, name="_admit", value=_admit)]


def quant_start_all_rows() -> list[Patch]:
    """A quantized-KV batch at a start > 0 switches to the packed format once EVERY row's
    offset has reached the start (the least offset), not on the first write at which ANY
    row has (mlx-lm switches each row alone at its own start). The longest rows are then
    quantized late; the shorter rows early either way, so the cells' KL gates pass it and
    only the longest rows' bits show it (``judging.quantized_exact_rows``)."""
    original(QuantizedMode, "passed_start")  # refuse if the engine moved it

    def passed_start(self) -> bool:
        return self.offset_ints.bounds()[0] >= max(self.quant.start, 1)

    return [Patch(owner=QuantizedMode, name="passed_start", value=passed_start)]

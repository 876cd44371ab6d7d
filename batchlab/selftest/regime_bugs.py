"""Seeded bugs in the schedule's regimes and the shared sampler: admission under the
prefill and completion caps, removal from the queue, chunked prefill, and the one
batched draw at temperature > 0 (``batchlab/engine/{scheduler,sampler}.py``)."""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core import sampler, scheduler
from batchlab.selftest.inject import Patch, during, original


def admit_ignores_completion_cap() -> list[Patch]:
    """Admission fills the prompt batch up to ``prefill_batch_size`` however many rows
    already decode, so more than ``completion_batch_size`` rows run at once."""
    return [during(scheduler.Scheduler, "_admit", "max_decoding", lambda self: 10**9)]


def remove_misses_the_queue() -> list[Patch]:
    """``remove`` evicts rows from the prompt and decode batches but forgets the queue: a
    row removed before it was admitted runs anyway."""
    Scheduler = scheduler.Scheduler
    clean = original(Scheduler, "remove")

    def remove(self, names, keep_history=False):
        if keep_history:  # a park: the bug is in plain evictions
            return clean(self, names, keep_history)
        gone = set(names)
        for batch in (self.prompt, self.decode):
            keep = [i for i, s in enumerate(batch.seqs) if s.name not in gone]
            if len(keep) < len(batch):
                batch.filter(keep)
        return {}

    return [Patch(owner=Scheduler, name="remove", value=remove)]


def shared_draw_per_row() -> list[Patch]:
    """The batch's shared sampler draws each row on its own, one global key per row
    (what a per-row loop over the batch does), instead of one categorical over (B, V)."""
    clean = original(sampler.BatchSampler, "__call__")

    def call(self, logprobs):
        if self.params.greedy or logprobs.shape[0] == 1:
            return clean(self, logprobs)
        return mx.concatenate([clean(self, logprobs[i : i + 1])
                               for i in range(logprobs.shape[0])])

    return [Patch(owner=sampler.BatchSampler, name="__call__", value=call)]


def temperature_before_filters() -> list[Patch]:
    """Temperature scales the logprobs before top-p / min-p / top-k instead of after
    them (mlx-lm filters the unscaled logprobs): at temperature != 1 the filters keep
    other tokens."""

    def filtered(logprobs, p):
        x = logprobs * (1.0 / p.temperature)
        if 0 < p.top_p < 1:
            x = sampler._top_p(x, p.top_p)
        if p.min_p != 0.0:
            x = sampler._min_p(x, p.min_p)
        if 0 < p.top_k < x.shape[-1]:
            x = sampler._top_k(x, p.top_k)
        return x

    return [Patch(owner=sampler, name="filtered_logits", value=filtered)]


def top_k_keeps_ties() -> list[Patch]:
    """Top-k keeps every token at least as likely as the k-th (a sort threshold), so
    ties at the k-th value keep more than k tokens; mlx-lm keeps exactly k."""

    def top_k(logprobs, k):
        kth = mx.sort(logprobs, axis=-1)[..., -k][..., None]
        return mx.where(logprobs < kth, -float("inf"), logprobs)

    return [Patch(owner=sampler, name="_top_k", value=top_k)]

"""Seeded bugs of the outside tester's third round (reports/gate/outside-tester-r3/): the
three bugs of its 31 that every default cell passed, each in a regime the matrix could
not express before its cells (a row's own token budget; a penalty context wider than 20
ids; top-k of 1 at temperature > 0), now each caught by cells of its own.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it). They wrap the engine's own
code where they can, so they keep tracking it as it changes.
"""

from __future__ import annotations

import dataclasses

from batchlab.engine.core import sampler as core_sampler
from batchlab.engine.core import scheduler as core_scheduler
from batchlab.engine.core.processors import DEFAULT_CONTEXT
from batchlab.engine.core.scheduler import Scheduler
from batchlab.selftest.inject import Patch, wrapped


def finish_at_first_rows_budget() -> list[Patch]:
    """A decode step finishes every row at the budget of the batch's first row (a finish
    check that reads one max_tokens for the batch), not at the row's own max_tokens: rows
    admitted together with different budgets stop together."""

    def make(clean):
        def _decode_step(self):
            seqs = list(self.decode.seqs)
            own = [s.request for s in seqs]
            budget = seqs[0].request.max_tokens
            for s in seqs:
                s.request = dataclasses.replace(s.request, max_tokens=budget)
            try:
                return clean(self)
            finally:
                for s, request in zip(seqs, own):
                    s.request = request
        return _decode_step

    return [wrapped(Scheduler, "_decode_step", make)]


def processor_context_capped() -> list[Patch]:
    """A row's logits-processor context is kept to the last 20 ids (mlx-lm's default
    context size, to bound memory) whatever context sizes its penalties ask for, so a
    penalty over 40 or 64 ids sees only the last 20."""

    def make(clean):
        def process_rows(logits, inputs, seqs):
            for seq in seqs:  # the fed id is appended next: 20 in all
                if seq.processors and seq.context is not None:
                    seq.context = seq.context[-(DEFAULT_CONTEXT - 1):]
            return clean(logits, inputs, seqs)
        return process_rows

    return [wrapped(core_scheduler, "process_rows", make)]


def top_k_one_as_off() -> list[Patch]:
    """top_k = 1 read as 'off' (as 0 is, the way some samplers spell it): a row asking for
    top-1 at temperature > 0 draws from the whole vocabulary instead of its one token."""

    def make(clean):
        def filtered_logits(logprobs, p):
            if p.top_k == 1:
                p = dataclasses.replace(p, top_k=0)
            return clean(logprobs, p)
        return filtered_logits

    return [wrapped(core_sampler, "filtered_logits", make)]

"""What enters the scheduler, and how much prompt a step may prefill.

Two rules, both the serve's own (the engine's l1 schedule, which the matrix gates, is
unchanged):

- ``admissible``: waiting jobs enter oldest first while fewer than ``max_batch`` rows
  are in the scheduler and the projected KV bytes stay within the budget
  (``budget.RowCost``); the first that does not fit waits, and so does everything behind
  it (no overtaking, so no job starves).
- ``chunk_width``: a step prefills at most ``budget`` prompt tokens, padding included.
  The scheduler's prefill forward is right-padded to its widest row, so the rows it will
  prefill share the budget: ``budget // rows`` tokens each (a 9000-token prompt beside
  three short ones at 512: 128 a row; alone: 512). A running row then waits one step's
  chunk for its next token, never a whole long prompt. Paths whose answers must not
  depend on their neighbours (invariant) keep a fixed chunk of ``budget`` per row.

The scheduler reads ``config.prefill_step_size`` at every step (its chunk per row), so
setting that before a step is all the engine needs.
"""

from __future__ import annotations

import dataclasses

from batchlab.engine.core.scheduler import Scheduler
from batchlab.serve.budget import RowCost
from batchlab.serve.job import Job


def admissible(waiting: list[Job], running: list[Job], *, max_batch: int,
               kv_budget: int | None, row_cost: RowCost, ring_now: int = 0) -> int:
    """How many of ``waiting`` (oldest first) may join ``running`` now (``ring_now``:
    see ``projected_bytes``)."""
    rows = list(running)
    for n, job in enumerate(waiting):
        if len(rows) >= max_batch or (
                kv_budget is not None
                and projected_bytes(row_cost, [*rows, job], ring_now) > kv_budget):
            return n
        rows.append(job)
    return len(waiting)


def projected_bytes(row_cost: RowCost, jobs: list[Job], ring_now: int = 0) -> int:
    """The KV bytes ``jobs`` can reach together, each row at its prompt + max_tokens.
    Their ring layers can hold more than the longest row: a batch ring grows one column a
    step for the whole batch and does not narrow when a row leaves (``BatchRing``), so it
    can reach the widest prompt, or ``ring_now`` (the columns the decode batch's rings
    hold: ``engine.core.cost.ring_width``), plus the most steps any row has left."""
    if not jobs:
        return 0
    widest = max(ring_now, *(len(j.prompt) for j in jobs))
    steps = max(j.max_tokens - j.num_tokens for j in jobs)
    return row_cost.batch_bytes([j.projected_tokens for j in jobs], widest + steps)


def prefill_left(scheduler: Scheduler) -> tuple[int, int]:
    """(rows, prompt tokens) the scheduler has still to prefill (its queue and its
    prompt batch; a row's last prompt token is fed by its first decode step)."""
    seqs = [*scheduler.queue, *scheduler.prompt.seqs]
    return len(seqs), sum(len(s.unprefilled) for s in seqs)


def chunk_width(scheduler: Scheduler, budget: int, *, fixed: bool = False) -> int:
    """Tokens per row of the next step's prefill forward."""
    if fixed:
        return budget
    rows = sum(1 for s in scheduler.prompt.seqs if s.unprefilled)
    # the step moves up to prefill_batch_size rows from its queue into the prompt batch
    # before it prefills; count the ones that have tokens to prefill (an over-count only
    # narrows the chunk)
    room = max(0, scheduler.config.prefill_batch_size - len(scheduler.prompt))
    rows += sum(1 for s in scheduler.queue[:room] if s.unprefilled)
    return max(1, budget // max(1, rows))


def set_chunk_width(scheduler: Scheduler, width: int) -> None:
    if scheduler.config.prefill_step_size != width:
        scheduler.config = dataclasses.replace(scheduler.config, prefill_step_size=width)

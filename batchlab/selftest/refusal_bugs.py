"""Seeded bugs in the engine's checks of a request (the refusal cells, docs/subjects.md):
mutants of mutation round 3 that only a cell sending bad or edge requests can tell.
Each check runs in the subject after the cell started (``submit`` builds the records),
so a bug injected in the worker reaches it."""

from __future__ import annotations

import math

from batchlab.engine.core import scheduler
from batchlab.engine.core.batch import Request
from batchlab.engine.core.sampler import SamplingParams
from batchlab.selftest.inject import Patch, during


def accepts_zero_max_tokens() -> list[Patch]:
    """A request with ``max_tokens = 0`` is taken (``Request.__post_init__`` checks only
    for an empty prompt; mutant ``Request.__post_init____mutmut_3``): the row is queued,
    prefilled and emits a token nobody asked for, where the engine must refuse it."""

    def post_init(self: Request) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.name!r} has an empty prompt; give at least one id")

    return [Patch(owner=Request, name="__post_init__", value=post_init)]


def refuses_explicit_greedy() -> list[Patch]:
    """A row's own sampler at temperature 0 is refused as out of range (``<= 0`` for
    ``< 0`` in ``SamplingParams.__post_init__``, mutant ``__post_init____mutmut_6``): the
    shared greedy sampler is built before the cell starts, so only a row that brings its
    own greedy sampler, built in the subject, meets the check."""
    clean = SamplingParams.__post_init__

    def post_init(self: SamplingParams) -> None:
        if not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ValueError(f"bad sampling params {self}: need a finite temperature > 0")
        clean(self)

    return [Patch(owner=SamplingParams, name="__post_init__", value=post_init)]


def accepts_duplicate_name() -> list[Patch]:
    """``Scheduler.insert`` no longer sees the rows in flight, so a second request under a
    running row's name is queued beside it (two rows, one name: their emissions mix)."""
    return [during(scheduler.Scheduler, "insert", "_all_seqs", lambda self: list)]

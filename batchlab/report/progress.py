"""Progress for a log or a pipe, where a live bar shows nothing: a plain line now and then.

    matrix: 25/844 cells, 0 failing so far (PASS 25), 4.1 s
    matrix: 50/844 cells, 1 failing so far (FAIL 1, PASS 49), 8.0 s

A line is printed every ``every`` items, when ``seconds`` have passed since the last line
(checked as items finish), and for the last item, so a CI log shows a run is alive and
how it is going long before its summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable

EVERY = 25
SECONDS = 10.0


class ProgressLines:
    """``lines.advance("0 failing so far")`` after each item; prints when it is due."""

    def __init__(self, console, total: int, label: str, noun: str, every: int = EVERY,
                 seconds: float = SECONDS, clock: Callable[[], float] = time.monotonic):
        self.console, self.total, self.label, self.noun = console, total, label, noun
        self.every, self.seconds, self.clock = every, seconds, clock
        self.done = 0
        self.start = self.last = clock()

    def advance(self, state: str) -> None:
        self.done += 1
        now = self.clock()
        due = (self.done % self.every == 0 or now - self.last >= self.seconds
               or self.done == self.total)
        if due:
            self.last = now
            self.console.print(f"{self.label}: {self.done}/{self.total} {self.noun}, {state}, "
                               f"{now - self.start:.1f} s", markup=False, highlight=False,
                               soft_wrap=True)

"""Drive a cell's script: the one loop both the oracle and the engine run.

A step's events (inserts, removes) are applied just before the step; the loop ends once
the last event has passed and no row is active.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from batchlab.matrix.cell import Cell, Row

MAX_IDLE_STEPS = 10_000


def drive_script(
    cell: Cell,
    *,
    insert: Callable[[list[Row]], None],
    remove: Callable[[list[Row]], None],
    step: Callable[[int], None],
    active: Callable[[], bool],
) -> None:
    events_at = defaultdict(list)
    for event in cell.events:
        events_at[event.step].append(event)
    last_event = max(events_at)
    n = 0
    while active() or n <= last_event:
        for event in events_at.get(n, ()):
            rows = [cell.row(name) for name in event.rows]
            (insert if event.action == "insert" else remove)(rows)
        step(n)
        n += 1
        if n > last_event + MAX_IDLE_STEPS:
            raise RuntimeError(f"{cell.id} did not finish within {MAX_IDLE_STEPS} idle steps")

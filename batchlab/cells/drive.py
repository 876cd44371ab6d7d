"""Drive a cell's script: the one loop both the oracle and the engine run.

A step's events (inserts, removes, parks, resumes) are applied just before the step, in
the order the script lists them; the loop ends once the last event has passed and no row
is active. ``park`` removes rows keeping their caches; ``resume`` inserts them again with
those caches and their ``resume`` ids (the callbacks keep the caches between the two);
``continue`` inserts a finished row again with the caches it finished with. A refusal
cell's bad requests go to ``refuse`` after the step's events; a driver without one (the
oracle's) skips them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from batchlab.cells.cell import Cell, Refusal, Row

MAX_IDLE_STEPS = 10_000


def drive_script(
    cell: Cell,
    *,
    insert: Callable[[list[Row]], None],
    remove: Callable[[list[Row]], None],
    step: Callable[[int], None],
    active: Callable[[], bool],
    park: Callable[[list[Row]], None] | None = None,
    resume: Callable[[list[Row]], None] | None = None,
    continue_: Callable[[list[Row]], None] | None = None,
    refuse: Callable[[Refusal], None] | None = None,
) -> None:
    actions = {"insert": insert, "remove": remove, "park": park, "resume": resume,
               "continue": continue_}
    events_at = defaultdict(list)
    for event in cell.events:
        events_at[event.step].append(event)
    last_event = max(events_at)
    n = 0
    while active() or n <= last_event:
        for event in events_at.get(n, ()):
            rows = [cell.row(name) for name in event.rows]
            act = actions[event.action]
            if act is None:
                raise ValueError(f"{cell.id}: this driver cannot '{event.action}' rows")
            act(rows)
        if refuse is not None:
            for refusal in cell.refusals:
                if refusal.step == n:
                    refuse(refusal)
        step(n)
        n += 1
        if n > last_event + MAX_IDLE_STEPS:
            raise RuntimeError(f"{cell.id} did not finish within {MAX_IDLE_STEPS} idle steps")

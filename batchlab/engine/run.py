"""``run_cell``: the engine's one public entry point for the matrix runner and the tests.

It drives the l1 scheduler through a cell's script exactly as the oracle drives
BatchGenerator: a step's events (inserts, removes) are applied just before the step.
"""

from __future__ import annotations

from collections import defaultdict

from mlx import nn

from batchlab.engine.batch import Request
from batchlab.engine.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.scheduler import Scheduler
from batchlab.matrix.cell import Cell
from batchlab.trajectory import Trajectory, TrajectoryBuilder

MAX_IDLE_STEPS = 10_000


def run_script(
    cell: Cell,
    model: nn.Module,
    dtype: str,
    config: ScheduleConfig = MLX_LM_DEFAULTS,
    keep_values: bool = True,
    scheduler_class: type[Scheduler] = Scheduler,
) -> Trajectory:
    scheduler = scheduler_class(model, config)
    out = TrajectoryBuilder(dtype, keep_values)
    events_at = defaultdict(list)
    for event in cell.events:
        events_at[event.step].append(event)
    last_event = max(events_at)

    step = 0
    while scheduler.num_active or step <= last_event:
        for event in events_at.get(step, ()):
            if event.action == "insert":
                rows = [cell.row(n) for n in event.rows]
                scheduler.insert(
                    [Request(name=r.name, prompt=r.prompt, max_tokens=r.max_tokens) for r in rows]
                )
                for row in rows:
                    out.start(row.name)
            else:
                scheduler.remove(list(event.rows))
        for emission in scheduler.step():
            out.add(emission.name, step, emission.token, emission.logprobs)
        step += 1
        if step > last_event + MAX_IDLE_STEPS:
            raise RuntimeError(f"engine run of {cell.id} did not finish")
    return out.build()


def run_cell(cell: Cell, keep_values: bool = True) -> Trajectory:
    """Run ``cell`` on its path. Raises ``Unsupported`` for paths the engine lacks."""
    from batchlab.engine.paths import PATHS
    from batchlab.zoo import load

    if cell.path not in PATHS:
        raise Unsupported(f"path {cell.path!r} is not implemented by the engine "
                          f"(known: {', '.join(PATHS)})")
    loaded = load(cell.model)
    return run_script(cell, loaded.model, loaded.dtype, keep_values=keep_values,
                      scheduler_class=PATHS[cell.path].scheduler)


class Unsupported(Exception):
    """The engine lacks the feature a cell needs: reported as UNSUPPORTED, not a failure."""

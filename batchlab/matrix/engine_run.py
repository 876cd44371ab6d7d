"""``run_cell``: a cell run on the engine, for the matrix runner and the tests.

The harness's side of the engine: it drives a path's scheduler through a cell's script
with the same driver (``matrix/drive.py``) that drives the oracle's BatchGenerator, so a
step's events (inserts, removes, parks, resumes) land just before the same step. The
engine itself knows nothing of cells.
"""

from __future__ import annotations

import mlx.core as mx
from mlx import nn

from batchlab.cells.cell import Cell
from batchlab.cells.drive import drive_script
from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.history import History, prefix_history
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.registry import Unsupported, resolve_path
from batchlab.trajectory import Trajectory, TrajectoryBuilder


def run_script(
    cell: Cell,
    model: nn.Module,
    dtype: str,
    config: ScheduleConfig | None = None,
    keep_values: bool = True,
    scheduler_class: type[Scheduler] = Scheduler,
) -> Trajectory:
    """``config`` defaults to the cell's schedule; the cell's sampler is shared by every row
    without its own, drawing from MLX's global key seeded here, as the oracle seeds it. A
    row's own sampler draws from the same global key, per row in batch order (BatchSampler),
    because that is what BatchGenerator does with per-row samplers."""
    config = config or cell.schedule
    scheduler = scheduler_class(model, config, sampling=cell.sampling)
    out = TrajectoryBuilder(dtype, keep_values)
    parked: dict[str, History] = {}
    finished: dict[str, History] = {}  # the caches a row finished with, for 'continue'
    scheduler.keep_finished_histories = any(e.action == "continue" for e in cell.events)
    mx.random.seed(cell.sampling.seed)

    def request(row, prompt, history):
        return Request(name=row.name, prompt=prompt, max_tokens=row.max_tokens,
                       sampling=row.sampling, processors=row.processors, history=history)

    def insert(rows):
        scheduler.insert([
            request(r, r.prompt, prefix_history(model, r.prefix, config.prefill_step_size)
                    if r.prefix else None) for r in rows])
        for row in rows:
            out.start(row.name)

    def park(rows):
        parked.update(scheduler.remove([r.name for r in rows], keep_history=True))

    def resume(rows):
        scheduler.insert([request(r, r.resume, parked.pop(r.name)) for r in rows])

    def continue_(rows):
        missing = [r.name for r in rows if r.name not in finished]
        if missing:
            raise RuntimeError(f"{cell.id}: rows {missing} are continued before they finished")
        scheduler.insert([request(r, r.resume, finished.pop(r.name)) for r in rows])

    def step(n):
        for emission in scheduler.step():
            out.add(emission.name, n, emission.token, emission.logprobs)
            if emission.history is not None:
                finished[emission.name] = emission.history

    drive_script(cell, insert=insert, remove=lambda rows: scheduler.remove([r.name for r in rows]),
                 step=step, active=lambda: scheduler.num_active > 0, park=park, resume=resume,
                 continue_=continue_)
    return out.build()


def run_cell(cell: Cell, keep_values: bool = True) -> Trajectory:
    """Run ``cell`` on its path. Raises ``Unsupported`` for paths the engine lacks, or that
    refuse the cell's model (the reason is in the message)."""
    from batchlab.zoo import load

    resolve_path(cell.path)  # an unknown path fails before any model loads
    loaded = load(cell.model)
    path = resolve_path(cell.path, loaded.model, model_name=cell.model)
    return run_script(cell, loaded.model, loaded.dtype, keep_values=keep_values,
                      scheduler_class=path.scheduler)


__all__ = ["Unsupported", "run_cell", "run_script"]

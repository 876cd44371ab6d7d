"""``run_cell``: a cell run on a subject, for the matrix runner and the tests.

The harness's side of the engine under test: ``subjects/drive.py`` drives any subject
through the cell's script with the same loop (``cells/drive.py``) that drives the
oracle's BatchGenerator. batchlab's own paths are a subject like any other
(``subjects/engine.py``): ``run_cell(cell)`` is ``--engine batchlab``, the default.
"""

from __future__ import annotations

from mlx import nn

from batchlab.cells.cell import Cell
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.choose import DEFAULT_ENGINE, subject_for
from batchlab.subjects.drive import run_subject
from batchlab.subjects.engine import BatchlabSubject
from batchlab.trajectory import Trajectory


def run_script(
    cell: Cell,
    model: nn.Module,
    dtype: str,
    config: ScheduleConfig | None = None,
    keep_values: bool = True,
    scheduler_class: type[Scheduler] = Scheduler,
) -> Trajectory:
    """``cell`` on an already loaded model, under ``config`` (default: the cell's
    schedule) and ``scheduler_class``: batchlab's subject with those pinned."""
    subject = BatchlabSubject(model=model, dtype=dtype, scheduler_class=scheduler_class,
                              config=config)
    return run_subject(cell, subject, keep_values=keep_values)


def run_cell(cell: Cell, keep_values: bool = True, engine: str = DEFAULT_ENGINE) -> Trajectory:
    """Run ``cell`` on ``engine`` (an ``--engine`` value; default batchlab, on the cell's
    path). Raises ``Unsupported`` for cells the subject declares it cannot run, or paths
    that refuse the cell's model (the reason is in the message)."""
    return run_subject(cell, subject_for(engine), keep_values=keep_values)


def engine_refusal(cell: Cell, engine: str = DEFAULT_ENGINE) -> str | None:
    """batchlab's own refusal of ``cell`` (its path declines the model), asked before the
    reference is fetched: a cell no oracle can make a reference for (mlx-lm's quantized
    cache on an MLA model) then reads UNSUPPORTED with the engine's reason instead of a
    missing golden. None for other subjects: they answer when they run."""
    if engine != DEFAULT_ENGINE:
        return None
    from batchlab.engine.paths.registry import resolve_path
    from batchlab.zoo import load

    try:
        resolve_path(cell.path)
        resolve_path(cell.path, load(cell.model).model, model_name=cell.model)
    except Unsupported as err:
        return str(err)
    except Exception:  # noqa: BLE001 - not a refusal: the run reports it with its context
        return None
    return None


__all__ = ["Unsupported", "engine_refusal", "run_cell", "run_script"]

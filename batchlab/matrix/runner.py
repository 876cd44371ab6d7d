"""Run cells (in worker processes, or in this one) and summarise the results.

Each finished cell is appended to ``results.jsonl`` at once, so a run cut short (Ctrl-C)
still leaves a readable record of what finished; the other report files are rendered
from that file at the end, also after an interrupt. A cell that kills its worker process
is that cell's ERROR and the run goes on (workers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.matrix.evaluate import Reference, evaluate_cell


def run_cells(
    cells: list[Cell],
    ref: Reference,
    jobs: int = 1,
    on_result: Callable[[CellResult], None] = lambda r: None,
    isolate: bool = True,
    worker_init: Callable[[], None] | None = None,
) -> list[CellResult]:
    """Evaluate ``cells``; results come back in matrix order whatever ``jobs`` is, and
    ``on_result`` sees each as it finishes. ``isolate``: in ``jobs`` worker processes that
    may crash (the default, also for one job); False: in this process, one after the other
    (patches made here apply, a crash ends the run). ``worker_init`` runs in each worker
    before its first cell (picklable; tests use it)."""
    results: dict[str, CellResult] = {}
    for result in _evaluate_all(cells, ref, jobs, isolate, worker_init):
        results[result.cell_id] = result
        on_result(result)
    return [results[c.id] for c in cells if c.id in results]


def _evaluate_all(cells, ref, jobs, isolate, worker_init) -> Iterable[CellResult]:
    if not isolate:
        if jobs != 1 or worker_init is not None:
            raise ValueError("in-process runs have one job and no worker initializer")
        for cell in cells:
            yield evaluate_cell(cell, ref)
        return
    from batchlab.matrix.workers import WorkerPool

    yield from WorkerPool(ref, jobs, worker_init).run(cells)


def default_report_dir(root: Path = Path("reports/runs")) -> Path:
    from datetime import datetime, timezone

    return root / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

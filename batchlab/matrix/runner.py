"""Select cells, run them (in worker processes, or in this one) and summarise the results.

Each finished cell is appended to ``results.jsonl`` at once, so a run cut short (Ctrl-C)
still leaves a readable record of what finished; the other report files are rendered
from that file at the end, also after an interrupt. A cell that kills its worker process
is that cell's ERROR and the run goes on (workers.py).
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from batchlab.matrix.cell import Cell
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.result import CellResult
from batchlab.status import Status


def select(cells: list[Cell], pattern: str | None, shard: tuple[int, int] | None) -> list[Cell]:
    """``pattern``: a glob if it has * ? or [, else a substring of the id; comma-separated
    alternatives. An alternative that IS a cell's id selects that cell alone (a rerun line
    names one cell, not the cells whose ids extend it with settings: ``.../ctx-short`` vs
    ``.../ctx-short/t1_r1``). ``shard`` (i, n), 1-based: every n-th cell starting at i."""
    if pattern:
        alternatives = [p.strip() for p in pattern.split(",") if p.strip()]
        ids = {c.id for c in cells}
        exact = {p for p in alternatives if p in ids}
        loose = [p for p in alternatives if p not in exact]
        cells = [c for c in cells if c.id in exact or any(_matches(c.id, p) for p in loose)]
    if shard:
        i, n = shard
        cells = [c for k, c in enumerate(cells) if k % n == i - 1]
    return cells


def _matches(cell_id: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(cell_id, pattern)
    return pattern in cell_id


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: write I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: need 1 <= I <= N")
    return i, n


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


def summary_line(results: list[CellResult]) -> str:
    counts = Counter(r.status for r in results)
    return (f"{counts[Status.PASS]}/{len(results)} cells passed "
            f"({counts[Status.UNSUPPORTED]} unsupported, {counts[Status.ORACLE_BUG]} oracle-bug)")


def exit_status(results: list[CellResult], strict: bool) -> int:
    return 1 if any(r.status.fails_run(strict) for r in results) else 0


def default_report_dir(root: Path = Path("reports/runs")) -> Path:
    from datetime import datetime, timezone

    return root / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

"""Run a list of cells (in-process or on a process pool) and stream results to a report.

Each finished cell is appended to ``results.jsonl`` at once, so a run cut short (Ctrl-C,
a crash) still leaves a readable record of what finished; the other report files are
rendered from that file at the end, also after an interrupt.
"""

from __future__ import annotations

import fnmatch
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from batchlab.matrix.cell import Cell
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.result import CellResult


def select(cells: list[Cell], pattern: str | None, shard: tuple[int, int] | None) -> list[Cell]:
    """``pattern``: a glob if it has * ? or [, else a substring of the id; comma-separated
    alternatives. ``shard`` (i, n), 1-based: every n-th cell starting at i."""
    if pattern:
        alternatives = [p.strip() for p in pattern.split(",") if p.strip()]
        cells = [c for c in cells if any(_matches(c.id, p) for p in alternatives)]
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
) -> list[CellResult]:
    """Evaluate ``cells``; results come back in matrix order whatever ``jobs`` is."""
    results: dict[str, CellResult] = {}
    for result in _evaluate_all(cells, ref, jobs):
        results[result.cell_id] = result
        on_result(result)
    return [results[c.id] for c in cells if c.id in results]


def _evaluate_all(cells: list[Cell], ref: Reference, jobs: int) -> Iterable[CellResult]:
    if jobs <= 1:
        for cell in cells:
            yield evaluate_cell(cell, ref)
        return
    # spawn, not fork: MLX keeps threads and device state that do not survive a fork.
    # Cells of one model go to the same worker in order, so each worker loads few models.
    context = multiprocessing.get_context("spawn")
    ordered = sorted(cells, key=lambda c: c.model)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(evaluate_cell, cell, ref) for cell in ordered]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def summary_line(results: list[CellResult]) -> str:
    counts = Counter(r.status for r in results)
    return (f"{counts['PASS']}/{len(results)} cells passed "
            f"({counts['UNSUPPORTED']} unsupported, {counts['ORACLE-BUG']} oracle-bug)")


def exit_status(results: list[CellResult], strict: bool) -> int:
    failing = {"FAIL", "ERROR", "STALE", "NO-GOLDEN"}
    if strict:
        failing |= {"ORACLE-BUG", "UNSUPPORTED"}
    return 1 if any(r.status in failing for r in results) else 0


def default_report_dir(root: Path = Path("reports/runs")) -> Path:
    from datetime import datetime, timezone

    return root / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")

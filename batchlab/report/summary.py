"""The one-line summary of a run and its exit status, for every command that judges cells."""

from __future__ import annotations

from collections import Counter

from batchlab.cells.result import CellResult
from batchlab.status import Status


def summary_line(results: list[CellResult]) -> str:
    counts = Counter(r.status for r in results)
    return (f"{counts[Status.PASS]}/{len(results)} cells passed "
            f"({counts[Status.UNSUPPORTED]} unsupported, {counts[Status.ORACLE_BUG]} oracle-bug)")


def exit_status(results: list[CellResult], strict: bool) -> int:
    return 1 if any(r.status.fails_run(strict) for r in results) else 0

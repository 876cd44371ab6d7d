"""What a terminal shows: a live progress bar with counts by status, then the tables."""

from __future__ import annotations

from collections import Counter, defaultdict

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from batchlab.matrix.result import CellResult

STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold magenta", "STALE": "yellow",
         "NO-GOLDEN": "yellow", "ORACLE-BUG": "cyan", "UNSUPPORTED": "dim"}


class LiveProgress:
    """``with LiveProgress(console, total) as p: p.advance(result)``."""

    def __init__(self, console: Console, total: int):
        self.counts: Counter = Counter()
        self.progress = Progress(
            TextColumn("[bold]matrix"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.description}"),
            console=console, transient=False, disable=not console.is_terminal,
        )
        self.task = self.progress.add_task("", total=total)

    def __enter__(self):  # -> LiveProgress
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def advance(self, result: CellResult) -> None:
        self.counts[result.status] += 1
        text = "  ".join(f"[{STYLE[s]}]{s} {n}[/]" for s, n in sorted(self.counts.items()))
        self.progress.update(self.task, advance=1, description=text)


def print_tables(console: Console, results: list[CellResult]) -> None:
    """Model x script: passed/total per group, coloured by the worst status in it."""
    scripts = list(dict.fromkeys(r.script for r in results))
    groups = defaultdict(list)
    for r in results:
        groups[(r.model, r.script)].append(r.status)
    table = Table(title="parity by model x script (passed/cells; colour = worst status)")
    table.add_column("model")
    for s in scripts:
        table.add_column(s, justify="center")
    from batchlab.report.table import worst

    for model in dict.fromkeys(r.model for r in results):
        row = []
        for s in scripts:
            statuses = groups.get((model, s))
            if not statuses:
                row.append("")
                continue
            passed = sum(x == "PASS" for x in statuses)
            style = STYLE[worst(statuses)]
            row.append(f"[{style}]{passed}/{len(statuses)}[/]")
        table.add_row(model, *row)
    console.print(table)


def print_problems(console: Console, results: list[CellResult], limit: int = 40) -> None:
    """Every failing cell with its first divergence and rerun command; oracle bugs and
    unsupported cells one line per model (the report folder lists each)."""
    bad = [r for r in results if r.status not in ("PASS", "UNSUPPORTED", "ORACLE-BUG")]
    for r in bad[:limit]:
        console.print(f"[{STYLE[r.status]}]{r.status}[/] {r.cell_id}: {escape(r.detail)}")
        console.print(f"    rerun: {r.rerun}", markup=False, highlight=False)
    if len(bad) > limit:
        console.print(f"... and {len(bad) - limit} more (see the report)")
    groups = defaultdict(list)
    for r in results:
        if r.status in ("ORACLE-BUG", "UNSUPPORTED"):
            groups[(r.status, r.model)].append(r)
    for (status, model), rs in groups.items():
        console.print(f"[{STYLE[status]}]{status}[/] {model}: {len(rs)} cells, e.g. "
                      f"{rs[0].cell_id}: {escape(rs[0].detail)}", highlight=False)

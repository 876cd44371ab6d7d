"""What a terminal shows: a live progress bar with counts by status, then the tables.

On a log or a pipe (not a terminal) the bar becomes plain progress lines, the grid marks
each group's worst status in words (there is no colour) and is split to fit the width,
and rerun commands stay on one line so they can be copied. Text that comes from cells or
errors is printed as text, never as rich markup: ``[[cell]] #3`` stays ``[[cell]] #3``.
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from batchlab.cells.result import CellResult
from batchlab.report.progress import ProgressLines
from batchlab.status import Status, worst

TITLE = "parity by model x script (passed/cells; colour = worst status)"
PLAIN_TITLE = "parity by model x script (passed/cells, then the worst status if not ok)"


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
        self.lines = None if console.is_terminal else ProgressLines(console, total, "matrix",
                                                                    "cells")

    def __enter__(self):  # -> LiveProgress
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def advance(self, result: CellResult) -> None:
        self.counts[result.status] += 1
        ranked = sorted(self.counts.items(), key=lambda kv: kv[0].severity)
        text = "  ".join(f"[{s.style}]{s} {n}[/]" for s, n in ranked)
        self.progress.update(self.task, advance=1, description=text)
        if self.lines:
            failing = sum(n for s, n in ranked if s.fails_run())
            counts = ", ".join(f"{s} {n}" for s, n in ranked)
            self.lines.advance(f"{failing} failing so far ({counts})")


def print_tables(console: Console, results: list[CellResult]) -> None:
    """Model x script: passed/total per group, coloured by the worst status in it; as
    many tables side by side as the console's width needs."""
    plain = console.color_system is None
    scripts = list(dict.fromkeys(r.script for r in results))
    models = list(dict.fromkeys(r.model for r in results))
    groups = defaultdict(list)
    for r in results:
        groups[(r.model, r.script)].append(r.status)
    text = {key: _group_text(statuses, plain) for key, statuses in groups.items()}
    console.print(PLAIN_TITLE if plain else TITLE, style="italic", highlight=False)
    for chunk in _column_chunks(console.width, models, scripts, text):
        table = Table()
        table.add_column("model")
        for s in chunk:
            table.add_column(s, justify="center")
        for model in models:
            table.add_row(model, *(text.get((model, s), Text("")) for s in chunk))
        console.print(table)


def _group_text(statuses: list[Status], plain: bool) -> Text:
    passed = sum(s == Status.PASS for s in statuses)
    bad = worst(statuses)
    mark = f" {bad.mark}" if plain and bad != Status.PASS else ""
    return Text(f"{passed}/{len(statuses)}{mark}", style=bad.style)


def _column_chunks(width: int, models, scripts, text) -> list[list[str]]:
    """Script columns packed into tables no wider than ``width`` (one column at least).
    A column takes its widest text, one space either side and one rule."""
    def need(texts) -> int:
        return max(len(t) for t in texts) + 3

    used = 1 + need(["model", *models])
    chunks: list[list[str]] = [[]]
    total = used
    for s in scripts:
        w = need([s, *(text[(m, s)].plain for m in models if (m, s) in text)])
        if chunks[-1] and total + w > width:
            chunks.append([])
            total = used
        chunks[-1].append(s)
        total += w
    return chunks


def print_problems(console: Console, results: list[CellResult], limit: int = 40) -> None:
    """Every failing cell with its first divergence and rerun command; oracle bugs and
    unsupported cells one example per model (the report folder lists each). Details are
    indented under their cell and wrapped between words; rerun commands are never wrapped."""
    bad = [r for r in results if r.status.fails_run()]
    for r in bad[:limit]:
        console.print(_headed(r.status, r.cell_id))
        console.print(_indented(r.detail, console.width), markup=False, highlight=False,
                      soft_wrap=True)
        console.print(f"    rerun: {r.rerun}", markup=False, highlight=False, soft_wrap=True)
    if len(bad) > limit:
        console.print(f"... and {len(bad) - limit} more (see the report)", highlight=False)
    groups = defaultdict(list)
    for r in results:
        if not r.status.fails_run() and r.status != Status.PASS:
            groups[(r.status, r.model)].append(r)
    for (status, model), rs in groups.items():
        console.print(_headed(status, f"{model}: {len(rs)} cells, e.g."))
        for text in (rs[0].cell_id, rs[0].detail):
            console.print(_indented(text, console.width), markup=False, highlight=False,
                          soft_wrap=True)


def _headed(status: Status, text: str) -> Text:
    return Text.assemble((str(status), status.style), " ", text)


def _indented(text: str, width: int) -> str:
    """Wrapped at ``width`` with four spaces before every line (a long id stays whole)."""
    return textwrap.fill(text, width=max(width, 40), initial_indent="    ",
                         subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)

"""``batchlab golden regen`` and ``batchlab golden check``."""

from __future__ import annotations

from rich.markup import escape

from batchlab.display import shown
from batchlab.golden.check import check_goldens, unique_scenarios
from batchlab.matrix.runner import select
from batchlab.matrix.spec import load_matrix
from batchlab.report.progress import ProgressLines


def regen_command(args, console) -> int:
    from batchlab.oracle.regen import regen_all

    cells = select(load_matrix(args.matrix), args.filter, None)
    scenarios = unique_scenarios(cells)
    if not scenarios:
        raise ValueError(f"no cell of {shown(args.matrix)} matches --filter {args.filter!r}")
    failed = bugs = 0
    lines = None if console.is_terminal else ProgressLines(console, len(scenarios), "oracle",
                                                           "goldens")
    for outcome in regen_all(scenarios, args.goldens, args.jobs, console):
        if outcome.error:
            failed += 1
            console.print(f"[red]oracle error[/] {escape(outcome.scenario_id)}\n"
                          f"{escape(outcome.error)}", highlight=False)
        elif outcome.serial_check == "oracle-bug":
            bugs += 1
            console.print(f"[cyan]ORACLE-BUG[/] {escape(outcome.scenario_id)} -> "
                          f"{escape(shown(outcome.path))}", highlight=False)
        if lines:
            lines.advance(f"{failed} oracle errors, {bugs} oracle-bug so far")
    console.print(f"wrote {len(scenarios) - failed} goldens under {shown(args.goldens)}"
                  f" ({failed} oracle errors)", highlight=False)
    return 1 if failed else 0


def check_command(args, console) -> int:
    cells = select(load_matrix(args.matrix), args.filter, None)
    scenarios = unique_scenarios(cells)
    problems = check_goldens(cells, args.goldens, shown(args.matrix))
    for p in problems:
        console.print(f"[yellow]{p.status}[/] {escape(p.message)}", highlight=False)
    counts = {s: sum(p.status == s for p in problems) for s in ("NO-GOLDEN", "STALE", "CORRUPT")}
    console.print(
        f"{len(cells)} cells, {len(scenarios)} goldens checked: "
        f"{len(scenarios) - len(problems)} ok, {counts['NO-GOLDEN']} missing, "
        f"{counts['STALE']} stale, {counts['CORRUPT']} corrupt", highlight=False)
    return 1 if problems else 0

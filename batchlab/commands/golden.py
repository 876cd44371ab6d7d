"""``batchlab golden regen`` and ``batchlab golden check``."""

from __future__ import annotations

from rich.markup import escape

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.display import shown
from batchlab.golden.check import check_goldens, unique_scenarios
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


def pins_command(args, console) -> int:
    """``batchlab golden pins [--write]``: the pin against matrix + goldens."""
    from batchlab.atomic import write_text_atomic
    from batchlab.backend import backend_key
    from batchlab.golden.pins import (
        DEFAULT_PINS,
        WRITE_COMMAND,
        current_pins,
        differences,
        read_pins,
    )

    args.pins = args.pins or DEFAULT_PINS
    old = read_pins(args.pins) if args.pins.is_file() else None
    now = current_pins(args.matrix, args.goldens, keep=old)
    backend = backend_key()
    changes = differences(old, now, backend) if old else ["no pin file yet"]
    for line in changes:
        print(line)
    if args.write:
        write_text_atomic(args.pins, now.to_json())
        print(f"wrote {shown(args.pins)}: {len(now.cell_ids)} cells, "
              f"{len(now.oracle_bug[backend])} ORACLE-BUG on {backend}")
        return 0
    if changes:
        print(f"the pin differs from {shown(args.matrix)} + goldens; if that is intended, "
              f"run `{WRITE_COMMAND}` and commit the file")
        return 1
    print(f"pin matches: {len(now.cell_ids)} cells, {len(now.oracle_bug[backend])} "
          f"ORACLE-BUG on {backend}")
    return 0

"""``batchlab matrix list`` and ``batchlab matrix run``."""

from __future__ import annotations

import time

from batchlab.cells.select import parse_shard, select
from batchlab.cells.spec import load_matrix
from batchlab.display import shown
from batchlab.matrix.evaluate import Reference
from batchlab.matrix.runner import default_report_dir, run_cells
from batchlab.report.summary import exit_status, summary_line


def list_command(args, console) -> int:
    cells = select(load_matrix(args.matrix), args.filter, None)
    for cell in cells:
        console.print(cell.id, markup=False, highlight=False)
    console.print(f"{len(cells)} cells", style="dim")
    return 0


def run_command(args, console) -> int:
    from batchlab.report.console import LiveProgress, print_problems, print_tables
    from batchlab.report.files import ResultsLog, write_all

    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    cells = select(load_matrix(args.matrix), args.filter, parse_shard(args.shard))
    if not cells:
        raise ValueError(f"no cell of {shown(args.matrix)} matches --filter {args.filter!r}; "
                         f"see `batchlab matrix list --matrix {shown(args.matrix)}`")
    ref = Reference(matrix=shown(args.matrix), goldens=args.goldens, live=args.live)
    report = args.report or default_report_dir()
    log = ResultsLog(report)
    results, complete = [], False
    start = time.perf_counter()
    mode = "live oracle" if args.live else f"goldens in {shown(args.goldens)}"
    console.print(f"{len(cells)} cells of {shown(args.matrix)} against {mode}, "
                  f"{args.jobs} worker(s)", markup=False, highlight=False, soft_wrap=True)
    try:
        with LiveProgress(console, len(cells)) as progress:

            def on_result(result):
                log.append(result)
                results.append(result)
                progress.advance(result)

            run_cells(cells, ref, jobs=args.jobs, on_result=on_result)
        complete = True
    finally:
        log.close()
        order = {c.id: i for i, c in enumerate(cells)}
        results.sort(key=lambda r: order[r.cell_id])
        summary = summary_line(results)
        write_all(report, results, summary, complete)
        if results:
            print_tables(console, results)
            print_problems(console, results)
        console.print(f"[bold]{summary}[/]" + ("" if complete else " [yellow](partial)[/]"))
        console.print(f"wall time {time.perf_counter() - start:.1f} s; report: {shown(report)}",
                      markup=False, highlight=False)
    return exit_status(results, args.strict)

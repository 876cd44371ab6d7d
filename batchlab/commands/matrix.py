"""``batchlab matrix list``, ``run``, ``export`` and ``judge``.

``run --engine`` names the subject under test (``batchlab/subjects/choose.py``);
``export`` writes every cell's script to files and ``judge`` judges the trajectories an
engine wrote from them: ``run --engine files:DIR`` under another name, so the statuses,
reports, JUnit and exit codes are ``run``'s own.
"""

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
        console.print(cell.id, markup=False, highlight=False, soft_wrap=True)
    console.print(f"{len(cells)} cells", style="dim", soft_wrap=True)
    return 0


def _selected(args):
    cells = select(load_matrix(args.matrix), args.filter, parse_shard(getattr(args, "shard", None)))
    if not cells:
        raise ValueError(f"no cell of {shown(args.matrix)} matches --filter {args.filter!r}; "
                         f"see `batchlab matrix list --matrix {shown(args.matrix)}`")
    return cells


def export_command(args, console) -> int:
    """Every selected cell's script, plus the solo runs its solo gate compares with."""
    from batchlab.judging.judging import Reference as JudgeReference
    from batchlab.judging.judging import judging_for
    from batchlab.matrix.solo import refusal, solo_cell
    from batchlab.subjects.files import export_scripts
    from batchlab.zoo.load import resolve

    cells = _selected(args)
    solo = [solo_cell(c, r) for c in cells
            if judging_for(c.path).reference is JudgeReference.SOLO and refusal(c) is None
            for r in c.rows]
    unique = list({(c.id, c.definition_digest()): c for c in [*cells, *solo]}.values())
    dirs = {m: str(resolve(m)) for m in sorted({c.model for c in unique})}
    count = export_scripts(unique, args.out, dirs)
    console.print(f"{count} scripts ({len(cells)} cells, {count - len(cells)} solo runs) in "
                  f"{shown(args.out / 'scripts')}; schemas in {shown(args.out)}; run them, "
                  "write the trajectories to one folder, then `batchlab matrix judge "
                  "--trajectories FOLDER`", markup=False, highlight=False, soft_wrap=True)
    return 0


def judge_command(args, console) -> int:
    if not args.trajectories.is_dir():
        raise ValueError(f"--trajectories {shown(args.trajectories)} is no folder; write the "
                         "trajectories of the exported scripts there (docs/subjects.md)")
    args.engine, args.live = f"files:{args.trajectories}", False
    return run_command(args, console)


def run_command(args, console) -> int:
    import os

    from batchlab.report.console import LiveProgress, print_problems, print_tables
    from batchlab.report.files import ResultsLog, write_all
    from batchlab.subjects.choose import check_engine

    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    cells = _selected(args)
    engine = getattr(args, "engine", "batchlab")
    check_engine(engine)
    if getattr(args, "timeout", None):
        os.environ["BATCHLAB_SUBJECT_TIMEOUT"] = str(args.timeout)  # workers inherit it
    ref = Reference(matrix=shown(args.matrix), goldens=args.goldens, live=args.live,
                    engine=engine, repeat=getattr(args, "repeat", False))
    report = args.report or default_report_dir()
    log = ResultsLog(report)
    results, complete = [], False
    start = time.perf_counter()
    mode = "live oracle" if args.live else f"goldens in {shown(args.goldens)}"
    subject = "" if engine == "batchlab" else f" on subject {engine}"
    console.print(f"{len(cells)} cells of {shown(args.matrix)}{subject} against {mode}, "
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

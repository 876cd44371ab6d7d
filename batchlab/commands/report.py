"""``batchlab report merge``: one report from the report folders of a run's shards."""

from __future__ import annotations

from batchlab.atomic import write_text_atomic
from batchlab.display import shown
from batchlab.report.files import JSONL, write_all
from batchlab.report.merge import merge_results, shard_was_cut_short


def merge_command(args, console) -> int:
    """``batchlab report merge``: the shards' report folders as one run's report."""
    from batchlab.cells.select import select
    from batchlab.cells.spec import load_matrix
    from batchlab.report.console import print_problems, print_tables
    from batchlab.report.summary import exit_status, summary_line

    order = [c.id for c in select(load_matrix(args.matrix), args.filter, None)]
    results, missing = merge_results(args.shards, order)
    cut = [f for f in args.shards if shard_was_cut_short(f)]
    complete = not missing and not cut
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / JSONL, "".join(r.to_json() + "\n" for r in results))
    summary = summary_line(results)
    write_all(args.out, results, summary, complete)
    if results:
        print_tables(console, results)
        print_problems(console, results)
    for folder in cut:
        console.print(f"shard {shown(folder)} was cut short (see its summary.md)",
                      markup=False, highlight=False)
    if missing:
        console.print(f"{len(missing)} cells of {shown(args.matrix)} have no result, "
                      f"e.g. {missing[0]}", markup=False, highlight=False)
    console.print(f"[bold]{summary}[/]" + ("" if complete else " [yellow](partial)[/]"))
    console.print(f"merged {len(args.shards)} shards into {shown(args.out)}", markup=False,
                  highlight=False)
    return max(exit_status(results, args.strict), 0 if complete else 1)

"""Merge the report folders of a sharded run into one, as if one run had made it.

CI fans a matrix out with ``batchlab matrix run --shard I/N --report shard-I``; this
concatenates the shards' results.jsonl (each cell must appear once), puts the cells back
in matrix order and renders summary.md, results.csv, junit.xml and heatmap.png from the
merged file, so the JUnit is merged by construction, not by splicing XML.

    python -m batchlab.report.merge --out reports/merged shard-1 shard-2 [--strict]

With ``--matrix`` (default: matrices/default.toml) and the shards' ``--filter``, the
merge checks that every selected cell has a result; missing cells, or a shard whose own
summary says it was cut short, make the merged report partial (and the exit status 1).
The exit status is the one ``matrix run`` would give for the merged results.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchlab.atomic import write_text_atomic
from batchlab.display import shown
from batchlab.matrix.result import CellResult
from batchlab.report.files import JSONL, PARTIAL_MARK, read_results, write_all


def merge_results(folders: list[Path], order: list[str] | None = None
                  ) -> tuple[list[CellResult], list[str]]:
    """(results in ``order`` (else concatenation order), the ids of ``order`` missing)."""
    seen: dict[str, Path] = {}
    results: list[CellResult] = []
    for folder in folders:
        if not (Path(folder) / JSONL).is_file():
            raise ValueError(f"{shown(folder)} has no {JSONL}: pass the --report folders of "
                             "the shards' `batchlab matrix run`")
        for r in read_results(folder):
            if r.cell_id in seen:
                raise ValueError(f"cell {r.cell_id} is in both {shown(seen[r.cell_id])} and "
                                 f"{shown(folder)}: merge the shards of one run (--shard I/N "
                                 "with the same N), each once")
            seen[r.cell_id] = Path(folder)
            results.append(r)
    if order is None:
        return results, []
    index = {cell_id: i for i, cell_id in enumerate(order)}
    strays = [r.cell_id for r in results if r.cell_id not in index]
    if strays:
        raise ValueError(f"{len(strays)} results are not cells of the matrix (first: "
                         f"{strays[0]}); pass the --matrix and --filter the shards ran")
    results.sort(key=lambda r: index[r.cell_id])
    return results, [cell_id for cell_id in order if cell_id not in seen]


def shard_was_cut_short(folder: Path) -> bool:
    summary = Path(folder) / "summary.md"
    return not summary.is_file() or PARTIAL_MARK in summary.read_text()


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from batchlab.defaults import DEFAULT_MATRIX
    from batchlab.matrix.runner import exit_status, select, summary_line
    from batchlab.matrix.spec import load_matrix
    from batchlab.report.console import print_problems, print_tables

    parser = argparse.ArgumentParser(prog="python -m batchlab.report.merge",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", nargs="+", type=Path, help="the shards' report folders")
    parser.add_argument("--out", type=Path, required=True, help="the merged report folder")
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX)
    parser.add_argument("--filter", default=None, help="the --filter the shards ran with")
    parser.add_argument("--strict", action="store_true",
                        help="ORACLE-BUG and UNSUPPORTED cells fail the merged run too")
    args = parser.parse_args(argv)
    console = Console()
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


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)

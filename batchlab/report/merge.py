"""Merge the report folders of a sharded run into one, as if one run had made it.

CI fans a matrix out with ``batchlab matrix run --shard I/N --report shard-I``; this
concatenates the shards' results.jsonl (each cell must appear once), puts the cells back
in matrix order and renders summary.md, results.csv, junit.xml and heatmap.png from the
merged file, so the JUnit is merged by construction, not by splicing XML.

    batchlab report merge --out reports/merged shard-1 shard-2 [--strict]

With ``--matrix`` (default: matrices/default.toml) and the shards' ``--filter``, the
merge checks that every selected cell has a result; missing cells, or a shard whose own
summary says it was cut short, make the merged report partial (and the exit status 1).
The exit status is the one ``matrix run`` would give for the merged results.
"""

from __future__ import annotations

from pathlib import Path

from batchlab.cells.result import CellResult
from batchlab.display import shown
from batchlab.report.files import JSONL, PARTIAL_MARK, read_results


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

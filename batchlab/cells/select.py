"""Which cells of a matrix a command runs: ``--filter`` patterns and ``--shard I/N``."""

from __future__ import annotations

import fnmatch

from batchlab.cells.cell import Cell


def select(cells: list[Cell], pattern: str | None, shard: tuple[int, int] | None) -> list[Cell]:
    """``pattern``: a glob if it has * ? or [, else a substring of the id; comma-separated
    alternatives. An alternative that IS a cell's id selects that cell alone (a rerun line
    names one cell, not the cells whose ids extend it with settings: ``.../ctx-short`` vs
    ``.../ctx-short/t1_r1``). ``shard`` (i, n), 1-based: every n-th cell starting at i."""
    if pattern:
        alternatives = [p.strip() for p in pattern.split(",") if p.strip()]
        ids = {c.id for c in cells}
        exact = {p for p in alternatives if p in ids}
        loose = [p for p in alternatives if p not in exact]
        cells = [c for c in cells if c.id in exact or any(_matches(c.id, p) for p in loose)]
    if shard:
        i, n = shard
        cells = [c for k, c in enumerate(cells) if k % n == i - 1]
    return cells


def _matches(cell_id: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(cell_id, pattern)
    return pattern in cell_id


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: write I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: need 1 <= I <= N")
    return i, n
